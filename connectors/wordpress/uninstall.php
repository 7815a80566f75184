<?php
/**
 * Deleting the plugin (Plugins -> Delete) removes what it stored: its options and its caches.
 *
 * @package QueueManager
 */

if ( ! defined( 'WP_UNINSTALL_PLUGIN' ) ) {
	exit;
}

foreach ( array( 'qm_queue_url', 'qm_room_id', 'qm_public_api_key', 'qm_return_check' ) as $qm_option ) {
	delete_option( $qm_option );
}
delete_site_transient( 'qm_update_feed' );
delete_transient( 'qm_verify_result' );
