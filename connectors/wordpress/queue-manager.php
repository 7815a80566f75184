<?php
/**
 * Plugin Name:       Queue Manager
 * Plugin URI:        https://github.com/queue-manager/queue-manager
 * Description:       Puts your Queue Manager waiting room in front of this site: every front-end page view asks the queue first, and a visitor whose turn has not come goes to the waiting room.
 * Version:           1.4.0
 * Requires at least: 5.8
 * Requires PHP:      7.4
 * Author:            Queue Manager
 * License:           MIT
 * Text Domain:       queue-manager
 * Update URI:        https://queue-manager.invalid/connectors/wordpress/update.json
 *
 * The Update URI names no real host on purpose: it keeps WordPress.org from ever offering another
 * plugin's update for this one, and routes the update check to this plugin's own filter, which reads
 * the feed of the queue configured under Settings -> Queue Manager
 * ({queue URL}/connectors/wordpress/update.json).
 *
 * @package QueueManager
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

define( 'QM_PLUGIN_VERSION', '__QM_CONNECTOR_VERSION__' );
define( 'QM_PLUGIN_FILE', __FILE__ );
define( 'QM_PLUGIN_BASENAME', plugin_basename( __FILE__ ) );
define( 'QM_UPDATE_HOST', 'queue-manager.invalid' );

require_once __DIR__ . '/includes/class-settings.php';
require_once __DIR__ . '/includes/class-gate.php';
require_once __DIR__ . '/includes/class-updater.php';
require_once __DIR__ . '/includes/class-revoke.php';

QM_Settings::register();
QM_Gate::register();
QM_Updater::register();
QM_Revoke::register();
