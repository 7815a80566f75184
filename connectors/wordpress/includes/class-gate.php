<?php
/**
 * The gate: before WordPress renders a front-end page, ask the queue whether this visitor may see it.
 *
 * One vouched door check per page view (GET {queue}/api/check?roomId=&url=&ip=&agent= with
 * Authorization: Bearer <Public API key>, 2 s):
 *
 * - a pass: the page is served, with the cookies the check set (the door key) and, when the visitor
 *   came back from the waiting room with ?qm_token=, that token as this site's qm_<room> cookie;
 * - the queue: 302 to {queue}/w/<room>?qm_return=<this page>;
 * - 429 (the queue is up and shedding checks): the waiting room too, unmarked;
 * - anything else fails open: the page is served, marked X-QM-Failover: timeout | unreachable |
 *   http-<status> | invalid-response.
 *
 * @package QueueManager
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * The front-end gate.
 */
class QM_Gate {

	const TIMEOUT_SEC = 2;
	const TOKEN_PARAM = 'qm_token';
	/** The last answer to "does the waiting room send visitors back to this site?" (see check_return_origin). */
	const RETURN_CHECK_OPTION = 'qm_return_check';
	/** File extensions a static subresource ends in (never .json, .txt or .xml: those are as often an API's answer). */
	const STATIC_EXT = 'js|mjs|cjs|css|map|png|jpe?g|gif|webp|avif|svg|ico|bmp|tiff?|woff2?|ttf|otf|eot|mp3|mp4|m4a|m4v|webm|ogg|oga|ogv|wav|flac|aac|mov';

	/** Hooks the gate: template_redirect runs for front-end page loads only, after the query is parsed. */
	public static function register() {
		add_action( 'template_redirect', array( __CLASS__, 'gate' ), 0 );
	}

	/**
	 * Whether this request is one the gate never asks about.
	 *
	 * wp-admin, wp-login.php, cron, REST, AJAX, XML-RPC, feeds, robots.txt, favicon, trackbacks, static
	 * subresources, and signed-in users who can edit posts (they must reach the site to run it).
	 */
	public static function skipped() {
		if ( is_admin() || wp_doing_ajax() || wp_doing_cron() || ( defined( 'REST_REQUEST' ) && REST_REQUEST ) || ( defined( 'XMLRPC_REQUEST' ) && XMLRPC_REQUEST ) ) {
			return true;
		}
		if ( ( defined( 'WP_CLI' ) && WP_CLI ) || 'cli' === PHP_SAPI ) {
			return true;
		}
		$path = (string) wp_parse_url( isset( $_SERVER['REQUEST_URI'] ) ? wp_unslash( $_SERVER['REQUEST_URI'] ) : '/', PHP_URL_PATH ); // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		$rest = '/' . trim( (string) wp_parse_url( rest_url(), PHP_URL_PATH ), '/' ) . '/';
		if ( 0 === strpos( rtrim( $path, '/' ) . '/', $rest ) || 0 === strpos( $path, '/wp-json/' ) || isset( $_GET['rest_route'] ) ) { // phpcs:ignore WordPress.Security.NonceVerification
			return true;
		}
		if ( preg_match( '#/(wp-login|wp-cron|xmlrpc|wp-signup|wp-activate|wp-trackback|wp-comments-post)\.php$#', $path ) ) {
			return true;
		}
		if ( is_feed() || is_robots() || is_trackback() || ( function_exists( 'is_favicon' ) && is_favicon() ) ) {
			return true;
		}
		if ( self::static_subresource( $path ) ) {
			return true;
		}
		if ( is_user_logged_in() && current_user_can( 'edit_posts' ) ) {
			return true;
		}
		return false;
	}

	/**
	 * The same four conditions as the queue's own inline bypass: GET/HEAD, a static-media extension, a
	 * plain path, and a Sec-Fetch-Dest (when sent) that is not a browsing context.
	 *
	 * @param string $path The request's path, as sent.
	 */
	public static function static_subresource( $path ) {
		$method = isset( $_SERVER['REQUEST_METHOD'] ) ? strtoupper( (string) $_SERVER['REQUEST_METHOD'] ) : 'GET'; // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		if ( 'GET' !== $method && 'HEAD' !== $method ) {
			return false;
		}
		if ( ! preg_match( '#\.(' . self::STATIC_EXT . ')$#i', $path ) ) {
			return false;
		}
		if ( preg_match( '#[;%\\\\]|(^|/)\.\.?(/|$)#', $path ) ) {
			return false;
		}
		$dest = isset( $_SERVER['HTTP_SEC_FETCH_DEST'] ) ? strtolower( (string) $_SERVER['HTTP_SEC_FETCH_DEST'] ) : ''; // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		return ! in_array( $dest, array( 'document', 'iframe', 'frame', 'object', 'embed' ), true );
	}

	/** The page being viewed, absolute, on this site's own host, without qm_token. */
	public static function current_url() {
		$home = wp_parse_url( home_url() );
		$uri  = isset( $_SERVER['REQUEST_URI'] ) ? (string) wp_unslash( $_SERVER['REQUEST_URI'] ) : '/'; // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		$base = ( is_ssl() ? 'https' : ( $home['scheme'] ?? 'http' ) ) . '://' . ( $home['host'] ?? 'localhost' ) . ( isset( $home['port'] ) ? ':' . (int) $home['port'] : '' );
		$uri  = remove_query_arg( self::TOKEN_PARAM, $uri );
		return $base . ( '' === $uri || '/' !== $uri[0] ? '/' . $uri : $uri );
	}

	/** The token the visitor brought back from the waiting room (?qm_token=), or ''. */
	public static function token_from_url() {
		$token = isset( $_GET[ self::TOKEN_PARAM ] ) ? (string) wp_unslash( $_GET[ self::TOKEN_PARAM ] ) : ''; // phpcs:ignore WordPress.Security
		return preg_match( '/^[A-Za-z0-9._~-]{1,2048}$/', $token ) ? $token : '';
	}

	/** The visitor's address the queue is told about (REMOTE_ADDR; a site behind a proxy filters qm_visitor_ip). */
	public static function visitor_ip() {
		$ip = isset( $_SERVER['REMOTE_ADDR'] ) ? (string) $_SERVER['REMOTE_ADDR'] : ''; // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		return (string) apply_filters( 'qm_visitor_ip', $ip );
	}

	/** The waiting room for this page. */
	public static function waiting_url( $page ) {
		return QM_Settings::queue_url() . '/w/' . rawurlencode( QM_Settings::room_id() ) . '?qm_return=' . rawurlencode( $page );
	}

	/** template_redirect: the check, then serve, send to the waiting room, or fail open. */
	public static function gate() {
		if ( ! QM_Settings::configured() ) {
			return;
		}
		if ( apply_filters( 'qm_gate_skip', self::skipped() ) ) {
			return;
		}
		$room  = QM_Settings::room_id();
		$page  = self::current_url();
		$token = self::token_from_url();
		self::check_return_origin( $page );
		$query = array(
			'roomId' => $room,
			'url'    => $page,
			'ip'     => self::visitor_ip(),
			'agent'  => isset( $_SERVER['HTTP_USER_AGENT'] ) ? substr( (string) wp_unslash( $_SERVER['HTTP_USER_AGENT'] ), 0, 512 ) : '', // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		);
		if ( '' !== $token ) {
			$query[ self::TOKEN_PARAM ] = $token;
		}
		$forward = array();
		foreach ( array( 'qm_', 'qms_', 'qm_dk_' ) as $prefix ) {
			$name = $prefix . $room;
			if ( isset( $_COOKIE[ $name ] ) && preg_match( '/^[A-Za-z0-9._~-]{1,2048}$/', (string) $_COOKIE[ $name ] ) ) {
				$forward[] = $name . '=' . $_COOKIE[ $name ];
			}
		}
		$headers = array( 'Authorization' => 'Bearer ' . QM_Settings::api_key() );
		if ( $forward ) {
			$headers['Cookie'] = implode( '; ', $forward );
		}
		$response = wp_remote_get(
			QM_Settings::queue_url() . '/api/check?' . http_build_query( $query, '', '&', PHP_QUERY_RFC3986 ),
			array(
				'timeout'     => self::TIMEOUT_SEC,
				'redirection' => 0,
				'headers'     => $headers,
				'user-agent'  => 'QueueManager-WordPress/' . QM_PLUGIN_VERSION,
			)
		);
		if ( is_wp_error( $response ) ) {
			$message = $response->get_error_message();
			self::fail_open( ( false !== stripos( $message, 'timed out' ) || false !== stripos( $message, 'cURL error 28' ) ) ? 'timeout' : 'unreachable' );
			return;
		}
		$status = (int) wp_remote_retrieve_response_code( $response );
		if ( 429 === $status ) {
			self::to_waiting_room( $page ); // the queue is up and shedding checks: not a fail-open
		}
		if ( 403 === $status ) {
			$refusal = json_decode( wp_remote_retrieve_body( $response ), true );
			if ( is_array( $refusal ) && isset( $refusal['code'] ) && 'access_blocked' === $refusal['code'] ) {
				self::blocked(); // one of the room's access rules refuses this request: never the site, never a fail-open
			}
		}
		if ( $status < 200 || $status > 299 ) {
			self::fail_open( 'http-' . $status );
			return;
		}
		$body = json_decode( wp_remote_retrieve_body( $response ), true );
		if ( ! is_array( $body ) || ! isset( $body['admit'] ) || ! is_bool( $body['admit'] ) ) {
			self::fail_open( 'invalid-response' );
			return;
		}
		if ( ! $body['admit'] ) {
			self::to_waiting_room( $page );
		}
		self::relay_cookies( $response, $room, $token );
	}

	/**
	 * Once per queue, room and site origin: may the waiting room send a visitor back here?
	 * (GET {queue}/api/verify?roomId=&origin=, 2 s.) When the room's targetUrl and returnOrigins do not cover
	 * this site, everyone the waiting room admits lands on targetUrl instead of back on this site, and
	 * nothing else says so: one line in the PHP error log, and the settings page says it too. The answer is
	 * kept (an option); a question the queue could not answer is asked again a minute later.
	 *
	 * @param string $page The page being viewed (absolute).
	 */
	public static function check_return_origin( $page ) {
		$origin = preg_replace( '#^(https?://[^/?\#]+).*$#s', '$1', $page );
		$room   = QM_Settings::room_id();
		$id     = md5( QM_Settings::queue_url() . '|' . $room . '|' . $origin );
		$known  = get_option( self::RETURN_CHECK_OPTION );
		if ( is_array( $known ) && isset( $known['id'] ) && $known['id'] === $id ) {
			return;
		}
		$wait = 'qm_return_check_' . substr( $id, 0, 16 );
		if ( false !== get_transient( $wait ) ) {
			return; // asked less than a minute ago (by a concurrent page view, or the queue did not answer)
		}
		set_transient( $wait, 1, MINUTE_IN_SECONDS );
		$response = wp_remote_get(
			QM_Settings::queue_url() . '/api/verify?' . http_build_query( array( 'roomId' => $room, 'origin' => $origin ), '', '&', PHP_QUERY_RFC3986 ),
			array(
				'timeout'     => self::TIMEOUT_SEC,
				'redirection' => 0,
				'headers'     => array( 'Authorization' => 'Bearer ' . QM_Settings::api_key() ),
				'user-agent'  => 'QueueManager-WordPress/' . QM_PLUGIN_VERSION,
			)
		);
		if ( is_wp_error( $response ) || 200 !== (int) wp_remote_retrieve_response_code( $response ) ) {
			return;
		}
		$body = json_decode( wp_remote_retrieve_body( $response ), true );
		if ( ! is_array( $body ) || ! isset( $body['room'] ) || ! is_array( $body['room'] ) ) {
			return;
		}
		$info    = $body['room'];
		$refused = ! empty( $info['exists'] ) && isset( $info['returnAllowed'] ) && false === $info['returnAllowed'];
		$target  = isset( $info['targetUrl'] ) ? (string) $info['targetUrl'] : '';
		$message = '';
		if ( $refused ) {
			$message = sprintf(
				'[qm] %1$s: the queue does not send visitors back to %2$s: the room\'s targetUrl (%3$s) and returnOrigins do not cover it, so everyone the waiting room admits lands on %3$s instead of this site. Add %2$s to the room\'s returnOrigins, or make it the targetUrl.',
				$room,
				$origin,
				$target
			);
			error_log( $message ); // phpcs:ignore WordPress.PHP.DevelopmentFunctions.error_log_error_log
		}
		update_option(
			self::RETURN_CHECK_OPTION,
			array(
				'id'      => $id,
				'message' => $message,
			),
			false
		);
	}

	/**
	 * A pass: the Set-Cookie lines the check answered (the door key), and the token brought back from
	 * the waiting room kept as this site's qm_<room> cookie, so the next page view carries it.
	 *
	 * @param array  $response The check's answer.
	 * @param string $room     The room id.
	 * @param string $token    The ?qm_token= of this request, or ''.
	 */
	private static function relay_cookies( $response, $room, $token ) {
		if ( headers_sent() ) {
			return;
		}
		$lines = wp_remote_retrieve_header( $response, 'set-cookie' );
		foreach ( (array) $lines as $line ) {
			$line = (string) $line;
			if ( '' !== $line && 0 === strpos( $line, 'qm' ) && ! preg_match( '/[\r\n]/', $line ) ) {
				header( 'Set-Cookie: ' . $line, false );
			}
		}
		if ( '' !== $token ) {
			setcookie(
				'qm_' . $room,
				$token,
				array(
					'expires'  => 0,
					'path'     => '/',
					'secure'   => is_ssl(),
					'httponly' => true,
					'samesite' => 'Lax',
				)
			);
		}
	}

	/**
	 * One of the room's access rules refuses this request (403 access_blocked from the check): 403, never cached.
	 */
	private static function blocked() {
		nocache_headers();
		wp_die(
			esc_html__( "This site does not accept requests like yours here. If you think this is a mistake, contact the site's owner.", 'queue-manager' ),
			esc_html__( 'Access not allowed', 'queue-manager' ),
			array( 'response' => 403 )
		);
	}

	/**
	 * The visitor waits: 302 to the waiting room, never cached.
	 *
	 * @param string $page The page to come back to.
	 */
	private static function to_waiting_room( $page ) {
		nocache_headers();
		wp_redirect( self::waiting_url( $page ), 302, 'Queue Manager' ); // phpcs:ignore WordPress.Security.SafeRedirect -- the queue is another host
		exit;
	}

	/**
	 * The queue did not answer usably: serve the page unqueued, and say so.
	 *
	 * @param string $reason timeout | unreachable | http-<status> | invalid-response.
	 */
	private static function fail_open( $reason ) {
		if ( ! headers_sent() ) {
			header( 'X-QM-Failover: ' . $reason );
		}
		do_action( 'qm_failover', $reason, QM_Settings::room_id() );
	}
}
