"""The jobs a waiting room does when nobody is looking: alert conditions and their webhook, threshold
activation, autotune and the target probes.

Every instance evaluates the alert conditions each ``ALERT_EVERY_MS`` (``autopilot.Autopilot``); the
jobs that must happen once for the fleet (deliveries, threshold activation, autotune, target probes)
run on the leader only, and what they decide is kept where every instance reads it
(``shared.Shared``: Valkey on ``STORE=valkey``, this process on ``STORE=memory``).
"""
