<?php
/**
 * Updates from the queue itself: WordPress's own update check reads
 * {queue URL}/connectors/wordpress/update.json, the feed the Queue Manager server builds from the
 * plugin it ships (version, the versioned zip's absolute URL and SHA-256, requirements, changelog).
 *
 * @package QueueManager
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * The update_plugins_{host} filter (the Update URI header's host), the same answer put into the
 * update_plugins transient when WordPress.org could not be asked (WordPress skips the Update URI
 * filters then), "View details", and the SHA-256 check of the downloaded zip.
 */
class QM_Updater {

	const SLUG      = 'queue-manager';
	const TRANSIENT = 'qm_update_feed';

	/** Hooks the update check, the details box and the download check. */
	public static function register() {
		add_filter( 'update_plugins_' . QM_UPDATE_HOST, array( __CLASS__, 'update' ), 10, 3 );
		add_filter( 'pre_set_site_transient_update_plugins', array( __CLASS__, 'inject' ) );
		add_filter( 'plugins_api', array( __CLASS__, 'details' ), 10, 3 );
		add_filter( 'upgrader_pre_download', array( __CLASS__, 'download' ), 10, 2 );
		add_filter( 'http_request_host_is_external', array( __CLASS__, 'queue_host_is_external' ), 10, 2 );
		add_filter( 'http_allowed_safe_ports', array( __CLASS__, 'queue_port' ), 10, 2 );
	}

	/**
	 * WordPress downloads packages with "safe" requests, which refuse a private address or a port other
	 * than 80, 443 and 8080. The queue the site owner configured is allowed, that host and port only.
	 *
	 * @param bool   $external What another filter said.
	 * @param string $host     The host asked for.
	 */
	public static function queue_host_is_external( $external, $host ) {
		$queue = wp_parse_url( QM_Settings::queue_url() );
		return $external || ( is_array( $queue ) && isset( $queue['host'] ) && strtolower( (string) $host ) === strtolower( $queue['host'] ) );
	}

	/**
	 * See queue_host_is_external().
	 *
	 * @param int[]  $ports The ports allowed.
	 * @param string $host  The host asked for.
	 * @return int[]
	 */
	public static function queue_port( $ports, $host ) {
		$queue = wp_parse_url( QM_Settings::queue_url() );
		if ( is_array( $ports ) && is_array( $queue ) && isset( $queue['host'], $queue['port'] ) && strtolower( (string) $host ) === strtolower( $queue['host'] ) ) {
			$ports[] = (int) $queue['port'];
		}
		return $ports;
	}

	/** The feed's URL ('' when no queue is configured). */
	public static function feed_url() {
		$queue = QM_Settings::queue_url();
		return '' === $queue ? '' : $queue . '/connectors/wordpress/update.json';
	}

	/**
	 * The feed, fetched at most every ten minutes, a failure included (false when it could not be read).
	 *
	 * @param bool $fresh Skip the cached copy.
	 * @return array|false
	 */
	public static function feed( $fresh = false ) {
		$url = self::feed_url();
		if ( '' === $url ) {
			return false;
		}
		$cached = $fresh ? false : get_site_transient( self::TRANSIENT );
		if ( is_array( $cached ) && ( $cached['_from'] ?? '' ) === $url ) {
			return empty( $cached['_failed'] ) ? $cached : false; // a feed that failed is not asked again for 10 min
		}
		$response = wp_remote_get( $url, array( 'timeout' => 5, 'headers' => array( 'Accept' => 'application/json' ) ) );
		$feed     = is_wp_error( $response ) || 200 !== (int) wp_remote_retrieve_response_code( $response ) ? null : json_decode( wp_remote_retrieve_body( $response ), true );
		if ( ! is_array( $feed ) || empty( $feed['version'] ) || empty( $feed['package'] ) || ( $feed['slug'] ?? '' ) !== self::SLUG ) {
			set_site_transient( self::TRANSIENT, array( '_from' => $url, '_failed' => true ), 10 * MINUTE_IN_SECONDS );
			return false;
		}
		$feed['_from'] = $url;
		set_site_transient( self::TRANSIENT, $feed, 10 * MINUTE_IN_SECONDS );
		return $feed;
	}

	/**
	 * update_plugins_{host}: what WordPress needs to offer the update (it compares the versions itself).
	 *
	 * @param array|false $update      What another filter said.
	 * @param array       $plugin_data This plugin's headers.
	 * @param string      $plugin_file Its file, relative to the plugins folder.
	 * @return array|false
	 */
	public static function update( $update, $plugin_data, $plugin_file ) {
		if ( QM_PLUGIN_BASENAME !== $plugin_file ) {
			return $update;
		}
		$feed = self::feed( true );
		return $feed ? self::offer( $feed ) : $update;
	}

	/**
	 * What WordPress's update check needs from the feed.
	 *
	 * @param array $feed The feed.
	 */
	private static function offer( $feed ) {
		return array(
			'slug'         => self::SLUG,
			'version'      => (string) $feed['version'],
			'url'          => (string) ( $feed['homepage'] ?? QM_Settings::queue_url() ),
			'package'      => (string) $feed['package'],
			'tested'       => (string) ( $feed['tested'] ?? '' ),
			'requires'     => (string) ( $feed['requires'] ?? '' ),
			'requires_php' => (string) ( $feed['requires_php'] ?? '' ),
			'icons'        => array(),
		);
	}

	/**
	 * pre_set_site_transient_update_plugins: a site that cannot reach WordPress.org (WordPress then stops
	 * before the Update URI filters) still hears of this plugin's update, when the transient is saved.
	 *
	 * @param mixed $transient The update_plugins transient being saved.
	 * @return mixed
	 */
	public static function inject( $transient ) {
		if ( ! is_object( $transient ) || isset( $transient->response[ QM_PLUGIN_BASENAME ] ) || isset( $transient->no_update[ QM_PLUGIN_BASENAME ] ) ) {
			return $transient;
		}
		$feed = self::feed();
		if ( ! $feed ) {
			return $transient;
		}
		$installed = get_file_data( QM_PLUGIN_FILE, array( 'Version' => 'Version' ) )['Version'];
		$offer     = (object) self::offer( $feed );
		$offer->id          = 'https://' . QM_UPDATE_HOST . '/connectors/wordpress/update.json';
		$offer->plugin      = QM_PLUGIN_BASENAME;
		$offer->new_version = $offer->version;
		if ( ! isset( $transient->response ) || ! is_array( $transient->response ) ) {
			$transient->response = array();
		}
		if ( ! isset( $transient->no_update ) || ! is_array( $transient->no_update ) ) {
			$transient->no_update = array();
		}
		if ( version_compare( $offer->new_version, $installed, '>' ) ) {
			$transient->response[ QM_PLUGIN_BASENAME ] = $offer;
		} else {
			$transient->no_update[ QM_PLUGIN_BASENAME ] = $offer;
		}
		return $transient;
	}

	/**
	 * plugins_api: the "View details" box, from the same feed.
	 *
	 * @param false|object|array $result What another filter said.
	 * @param string             $action The API action.
	 * @param object             $args   Its arguments (slug).
	 * @return false|object|array
	 */
	public static function details( $result, $action, $args ) {
		if ( 'plugin_information' !== $action || ! is_object( $args ) || ( $args->slug ?? '' ) !== self::SLUG ) {
			return $result;
		}
		$feed = self::feed();
		if ( ! $feed ) {
			return $result;
		}
		$sections = array();
		foreach ( (array) ( $feed['sections'] ?? array() ) as $name => $html ) {
			$sections[ sanitize_key( $name ) ] = wp_kses_post( (string) $html );
		}
		return (object) array(
			'name'          => (string) ( $feed['name'] ?? 'Queue Manager' ),
			'slug'          => self::SLUG,
			'version'       => (string) $feed['version'],
			'author'        => 'Queue Manager',
			'homepage'      => (string) ( $feed['homepage'] ?? '' ),
			'requires'      => (string) ( $feed['requires'] ?? '' ),
			'tested'        => (string) ( $feed['tested'] ?? '' ),
			'requires_php'  => (string) ( $feed['requires_php'] ?? '' ),
			'last_updated'  => (string) ( $feed['last_updated'] ?? '' ),
			'download_link' => (string) $feed['package'],
			'sections'      => $sections,
		);
	}

	/**
	 * upgrader_pre_download: when WordPress fetches the feed's package, download it here and refuse it
	 * unless its SHA-256 is the feed's.
	 *
	 * @param bool|WP_Error|string $reply   What another filter said (false: WordPress downloads).
	 * @param string               $package The URL being installed.
	 * @return bool|WP_Error|string
	 */
	public static function download( $reply, $package ) {
		if ( false !== $reply ) {
			return $reply;
		}
		$feed = self::feed();
		if ( ! $feed || (string) $feed['package'] !== (string) $package || empty( $feed['sha256'] ) ) {
			return $reply;
		}
		return self::fetch_verified( (string) $package, strtolower( (string) $feed['sha256'] ) );
	}

	/**
	 * Downloads $url to a temporary file; the file's path, or a WP_Error when its SHA-256 is not $sha256.
	 *
	 * @param string $url    The zip.
	 * @param string $sha256 The SHA-256 (hex) it must have.
	 * @return string|WP_Error
	 */
	public static function fetch_verified( $url, $sha256 ) {
		if ( ! function_exists( 'download_url' ) ) {
			require_once ABSPATH . 'wp-admin/includes/file.php';
		}
		$file = download_url( $url, 300 );
		if ( is_wp_error( $file ) ) {
			return $file;
		}
		if ( ! hash_equals( $sha256, (string) hash_file( 'sha256', $file ) ) ) {
			wp_delete_file( $file );
			return new WP_Error( 'qm_sha256_mismatch', __( 'The downloaded Queue Manager plugin does not match the SHA-256 of the update feed; nothing was installed.', 'queue-manager' ) );
		}
		return $file;
	}
}
