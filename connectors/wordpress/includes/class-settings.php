<?php
/**
 * Settings -> Queue Manager: the queue's URL, the room id and the Public API key (wp_options).
 *
 * @package QueueManager
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * The plugin's three options, their sanitizing, and the settings page with its "Verify" button.
 */
class QM_Settings {

	const OPTION_URL  = 'qm_queue_url';
	const OPTION_ROOM = 'qm_room_id';
	const OPTION_KEY  = 'qm_public_api_key';
	const PAGE        = 'queue-manager';

	/** Hooks the settings page (admin only). */
	public static function register() {
		if ( ! is_admin() ) {
			return;
		}
		add_action( 'admin_menu', array( __CLASS__, 'menu' ) );
		add_action( 'admin_init', array( __CLASS__, 'fields' ) );
		add_action( 'admin_post_qm_verify', array( __CLASS__, 'verify' ) );
		add_filter( 'plugin_action_links_' . QM_PLUGIN_BASENAME, array( __CLASS__, 'action_links' ) );
	}

	/** The queue's base URL without a trailing slash ('' when unset). */
	public static function queue_url() {
		return rtrim( (string) get_option( self::OPTION_URL, '' ), '/' );
	}

	/** The room id ('' when unset). */
	public static function room_id() {
		return (string) get_option( self::OPTION_ROOM, '' );
	}

	/** The Public API key ('' when unset). */
	public static function api_key() {
		return (string) get_option( self::OPTION_KEY, '' );
	}

	/** True when all three settings are filled in: only then does the gate run. */
	public static function configured() {
		return '' !== self::queue_url() && '' !== self::room_id() && '' !== self::api_key();
	}

	/**
	 * An absolute http(s) URL, no query or fragment, no trailing slash; '' for anything else.
	 *
	 * @param mixed $value What the form sent.
	 */
	public static function sanitize_url( $value ) {
		$value = trim( (string) $value );
		if ( '' === $value ) {
			return '';
		}
		$parts = wp_parse_url( $value );
		if ( ! is_array( $parts ) || empty( $parts['host'] ) || ! in_array( strtolower( $parts['scheme'] ?? '' ), array( 'http', 'https' ), true ) ) {
			self::refuse( self::OPTION_URL, 'qm_bad_url', __( 'The queue URL must be an absolute http(s) address.', 'queue-manager' ) );
			return self::queue_url();
		}
		$url = strtolower( $parts['scheme'] ) . '://' . strtolower( $parts['host'] ) . ( isset( $parts['port'] ) ? ':' . (int) $parts['port'] : '' ) . ( $parts['path'] ?? '' );
		return rtrim( esc_url_raw( $url, array( 'http', 'https' ) ), '/' );
	}

	/**
	 * A room id: letters, digits, '-' and '_' (what the queue allows), at most 64.
	 *
	 * @param mixed $value What the form sent.
	 */
	public static function sanitize_room( $value ) {
		$value = trim( (string) $value );
		if ( '' !== $value && ! preg_match( '/^[A-Za-z0-9_-]{1,64}$/', $value ) ) {
			self::refuse( self::OPTION_ROOM, 'qm_bad_room', __( 'A room id is letters, digits, "-" and "_".', 'queue-manager' ) );
			return self::room_id();
		}
		return $value;
	}

	/**
	 * The key: printable ASCII, no spaces; an empty field keeps the stored key (it is never shown back).
	 *
	 * @param mixed $value What the form sent.
	 */
	public static function sanitize_key( $value ) {
		$value = trim( (string) $value );
		if ( '' === $value ) {
			return self::api_key();
		}
		if ( ! preg_match( '/^[\x21-\x7e]{1,256}$/', $value ) ) {
			self::refuse( self::OPTION_KEY, 'qm_bad_key', __( 'The Public API key has a character a key never has.', 'queue-manager' ) );
			return self::api_key();
		}
		return $value;
	}

	/**
	 * Tells the settings page why a value was not saved (add_settings_error, when the admin has it).
	 *
	 * @param string $setting The option.
	 * @param string $code    A code.
	 * @param string $message What the page shows.
	 */
	private static function refuse( $setting, $code, $message ) {
		if ( function_exists( 'add_settings_error' ) ) {
			add_settings_error( $setting, $code, $message );
		}
	}

	/** Settings -> Queue Manager. */
	public static function menu() {
		add_options_page( 'Queue Manager', 'Queue Manager', 'manage_options', self::PAGE, array( __CLASS__, 'page' ) );
	}

	/** The three fields. */
	public static function fields() {
		register_setting( self::PAGE, self::OPTION_URL, array( 'type' => 'string', 'sanitize_callback' => array( __CLASS__, 'sanitize_url' ), 'default' => '' ) );
		register_setting( self::PAGE, self::OPTION_ROOM, array( 'type' => 'string', 'sanitize_callback' => array( __CLASS__, 'sanitize_room' ), 'default' => '' ) );
		register_setting( self::PAGE, self::OPTION_KEY, array( 'type' => 'string', 'sanitize_callback' => array( __CLASS__, 'sanitize_key' ), 'default' => '' ) );
		add_settings_section( 'qm_main', '', '__return_false', self::PAGE );
		add_settings_field( self::OPTION_URL, __( 'Queue URL', 'queue-manager' ), array( __CLASS__, 'field_url' ), self::PAGE, 'qm_main' );
		add_settings_field( self::OPTION_ROOM, __( 'Room id', 'queue-manager' ), array( __CLASS__, 'field_room' ), self::PAGE, 'qm_main' );
		add_settings_field( self::OPTION_KEY, __( 'Public API key', 'queue-manager' ), array( __CLASS__, 'field_key' ), self::PAGE, 'qm_main' );
	}

	/** The queue URL field. */
	public static function field_url() {
		printf( '<input type="url" class="regular-text" name="%s" value="%s" placeholder="https://queue.example.com">', esc_attr( self::OPTION_URL ), esc_attr( self::queue_url() ) );
	}

	/** The room id field. */
	public static function field_room() {
		printf( '<input type="text" class="regular-text" name="%s" value="%s" pattern="[A-Za-z0-9_-]{1,64}">', esc_attr( self::OPTION_ROOM ), esc_attr( self::room_id() ) );
	}

	/** The key field: write-only. */
	public static function field_key() {
		$placeholder = '' === self::api_key() ? '' : __( '(stored; leave empty to keep it)', 'queue-manager' );
		printf( '<input type="password" class="regular-text" name="%s" value="" autocomplete="off" placeholder="%s">', esc_attr( self::OPTION_KEY ), esc_attr( $placeholder ) );
		echo '<p class="description">' . esc_html__( 'The queue\'s PUBLIC_API_KEY. It is sent only as Authorization: Bearer, never in a URL.', 'queue-manager' ) . '</p>';
	}

	/** The page: the form, then the Verify button and its last answer. */
	public static function page() {
		if ( ! current_user_can( 'manage_options' ) ) {
			return;
		}
		echo '<div class="wrap"><h1>Queue Manager</h1>';
		settings_errors();
		echo '<form method="post" action="options.php">';
		settings_fields( self::PAGE );
		do_settings_sections( self::PAGE );
		submit_button();
		echo '</form>';
		$return = get_option( QM_Gate::RETURN_CHECK_OPTION );
		if ( is_array( $return ) && ! empty( $return['message'] ) ) {
			printf( '<div class="notice notice-warning inline"><p>%s</p></div>', esc_html( preg_replace( '/^\[qm\] /', '', (string) $return['message'] ) ) );
		}
		$result = get_transient( 'qm_verify_result' );
		if ( is_array( $result ) ) {
			$class = ! empty( $result['ok'] ) ? 'notice-success' : 'notice-error';
			printf( '<div class="notice %s inline"><p>%s</p></div>', esc_attr( $class ), esc_html( $result['message'] ) );
		}
		echo '<form method="post" action="' . esc_url( admin_url( 'admin-post.php' ) ) . '">';
		echo '<input type="hidden" name="action" value="qm_verify">';
		wp_nonce_field( 'qm_verify' );
		submit_button( __( 'Verify', 'queue-manager' ), 'secondary', 'submit', false );
		echo ' <span class="description">' . esc_html__( 'Asks the queue whether it accepts the stored key (GET /api/verify).', 'queue-manager' ) . '</span>';
		echo '</form></div>';
	}

	/**
	 * Asks {queue}/api/verify with the stored key; what it said is shown once on the page.
	 *
	 * @return array{ok: bool, message: string}
	 */
	public static function check_key() {
		if ( '' === self::queue_url() || '' === self::api_key() ) {
			return array( 'ok' => false, 'message' => __( 'Fill in the queue URL and the Public API key first.', 'queue-manager' ) );
		}
		$response = wp_remote_get(
			self::queue_url() . '/api/verify',
			array(
				'timeout'     => 5,
				'redirection' => 0,
				'headers'     => array( 'Authorization' => 'Bearer ' . self::api_key() ),
			)
		);
		if ( is_wp_error( $response ) ) {
			return array( 'ok' => false, 'message' => sprintf( __( 'The queue did not answer: %s', 'queue-manager' ), $response->get_error_message() ) );
		}
		$body = json_decode( wp_remote_retrieve_body( $response ), true );
		if ( 200 === wp_remote_retrieve_response_code( $response ) && is_array( $body ) && ! empty( $body['ok'] ) ) {
			$problems = isset( $body['problems'] ) && is_array( $body['problems'] ) ? implode( '; ', array_map( 'strval', $body['problems'] ) ) : '';
			$message  = sprintf( __( 'The queue accepts the key (server %s).', 'queue-manager' ), (string) ( $body['version'] ?? '?' ) );
			return array( 'ok' => true, 'message' => '' === $problems ? $message : $message . ' ' . $problems );
		}
		$problems = is_array( $body ) && isset( $body['problems'] ) && is_array( $body['problems'] ) ? implode( '; ', array_map( 'strval', $body['problems'] ) ) : 'HTTP ' . wp_remote_retrieve_response_code( $response );
		return array( 'ok' => false, 'message' => sprintf( __( 'The queue refused the key: %s', 'queue-manager' ), $problems ) );
	}

	/** admin-post.php?action=qm_verify. */
	public static function verify() {
		if ( ! current_user_can( 'manage_options' ) ) {
			wp_die( esc_html__( 'You may not do that.', 'queue-manager' ), 403 );
		}
		check_admin_referer( 'qm_verify' );
		set_transient( 'qm_verify_result', self::check_key(), 60 );
		wp_safe_redirect( admin_url( 'options-general.php?page=' . self::PAGE ) );
		exit;
	}

	/**
	 * A "Settings" link on the Plugins screen.
	 *
	 * @param string[] $links The row's links.
	 */
	public static function action_links( $links ) {
		array_unshift( $links, '<a href="' . esc_url( admin_url( 'options-general.php?page=' . self::PAGE ) ) . '">' . esc_html__( 'Settings', 'queue-manager' ) . '</a>' );
		return $links;
	}
}
