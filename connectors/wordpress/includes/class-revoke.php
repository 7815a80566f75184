<?php
/**
 * Ending a visitor's session: once a buyer is done, their slot goes to the next visitor in line at once
 * instead of being held until the room's sessionTtlSec runs out.
 *
 * qm_revoke_session() sends the current request's door key and ticket (the qm_dk_<room> and qm_<room>
 * cookies), or its edge pass (qmp_<room>), to {queue}/api/sessions/revoke with the Public API key (2 s).
 * With WooCommerce it runs on the order-received ("thank you") page, woocommerce_thankyou: that hook runs
 * in the buyer's own request, so their cookies name the session, right after checkout. Not on
 * woocommerce_order_status_completed, which fires when the order is marked completed, often later and in
 * a shop manager's request or a payment gateway's callback, where the buyer's cookies are not.
 *
 * @package QueueManager
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * The session's end, asked of the queue.
 */
class QM_Revoke {

	const TIMEOUT_SEC = 2;
	const COOKIE_SHAPE = '/^[A-Za-z0-9._~-]{1,4096}$/';

	/** Hooks the order-received page (WooCommerce; nothing happens without it). */
	public static function register() {
		add_action( 'woocommerce_thankyou', array( __CLASS__, 'order_received' ), 10, 1 );
	}

	/**
	 * woocommerce_thankyou: the buyer sees their order received; a failed order keeps the session (the buyer
	 * will pay again). The filter qm_revoke_on_order_received (true) turns it off.
	 *
	 * @param int $order_id The order shown.
	 */
	public static function order_received( $order_id ) {
		if ( ! apply_filters( 'qm_revoke_on_order_received', true, $order_id ) ) {
			return;
		}
		if ( function_exists( 'wc_get_order' ) ) {
			$order = wc_get_order( $order_id );
			if ( $order && $order->has_status( 'failed' ) ) {
				return;
			}
		}
		qm_revoke_session();
	}

	/** The request's cookie named $name when it has the shape of ours, else ''. */
	private static function cookie( $name ) {
		$value = isset( $_COOKIE[ $name ] ) ? (string) wp_unslash( $_COOKIE[ $name ] ) : ''; // phpcs:ignore WordPress.Security.ValidatedSanitizedInput
		return preg_match( self::COOKIE_SHAPE, $value ) ? $value : '';
	}

	/**
	 * End the current visitor's session at the queue. True when a live session ended; false when the
	 * visitor held none, the plugin is not configured, or the queue could not be asked (logged).
	 */
	public static function revoke() {
		if ( ! QM_Settings::configured() ) {
			return false;
		}
		$room = QM_Settings::room_id();
		$door = self::cookie( 'qm_dk_' . $room );
		$pass = self::cookie( 'qmp_' . $room );
		if ( '' !== $door ) {
			$body   = array(
				'roomId'  => $room,
				'doorKey' => $door,
			);
			$ticket = self::cookie( 'qm_' . $room );
			if ( '' !== $ticket ) {
				$body['token'] = $ticket;
			}
		} elseif ( '' !== $pass ) {
			$body = array(
				'roomId' => $room,
				'pass'   => $pass,
			);
		} else {
			return false;
		}
		$response = wp_remote_post(
			QM_Settings::queue_url() . '/api/sessions/revoke',
			array(
				'timeout'     => self::TIMEOUT_SEC,
				'redirection' => 0,
				'headers'     => array(
					'Authorization' => 'Bearer ' . QM_Settings::api_key(),
					'Content-Type'  => 'application/json',
				),
				'body'        => wp_json_encode( $body ),
				'user-agent'  => 'QueueManager-WordPress/' . QM_PLUGIN_VERSION,
			)
		);
		if ( is_wp_error( $response ) ) {
			error_log( '[qm] ' . $room . ': could not end a session at the queue: ' . $response->get_error_message() ); // phpcs:ignore WordPress.PHP.DevelopmentFunctions.error_log_error_log
			return false;
		}
		$status = (int) wp_remote_retrieve_response_code( $response );
		$answer = json_decode( wp_remote_retrieve_body( $response ), true );
		if ( 200 !== $status ) {
			$code = is_array( $answer ) && isset( $answer['code'] ) ? (string) $answer['code'] : '';
			error_log( '[qm] ' . $room . ': the queue refused to end a session (' . $status . ' ' . $code . ')' ); // phpcs:ignore WordPress.PHP.DevelopmentFunctions.error_log_error_log
			return false;
		}
		$revoked = is_array( $answer ) && isset( $answer['revoked'] ) && true === $answer['revoked'];
		do_action( 'qm_session_revoked', $revoked, $room );
		return $revoked;
	}
}

if ( ! function_exists( 'qm_revoke_session' ) ) {
	/**
	 * End the current visitor's session at the queue (their order is complete, say), for any plugin or
	 * theme: their slot goes to the next visitor in line at once, and their next page is the waiting
	 * room's. True when a live session ended; false otherwise. Never throws.
	 *
	 * @return bool
	 */
	function qm_revoke_session() {
		return QM_Revoke::revoke();
	}
}
