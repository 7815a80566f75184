"""GET and POST /api/admin/alerts: what is firing, the deliveries, and a test page.

A caller without the "team" grant (a share link) gets the same view without the webhook address, a
blocked probe's refusal text or a delivery's error, each of which can name an internal address.
"""

from __future__ import annotations

from dataclasses import asdict

from queue_manager.http.wire import HttpError, send_json
from queue_manager.routes.call import Call


async def alerts_get(call: Call) -> None:
    alerts = call.ctx.attached.alerts
    if alerts is None:
        raise HttpError(404, "not_found", "No such route.")
    await send_json(call.send, 200, alerts.view(full=call.who.may("team")), head=call.req.method == "HEAD")


async def alerts_test(call: Call) -> None:
    alerts = call.ctx.attached.alerts
    if alerts is None:
        raise HttpError(404, "not_found", "No such route.")
    if not call.ctx.settings.alert_webhook_url:
        raise HttpError(
            409,
            "webhook_not_configured",
            "No ALERT_WEBHOOK_URL is set, so there is nowhere to send a test alert. Conditions are still "
            "evaluated and listed under Firing now.",
        )
    result = await alerts.test()
    delivery = result["delivery"]
    await call.audit("alerts.test", delivered=delivery.ok, httpStatus=delivery.httpStatus)
    await send_json(call.send, 200, {"sent": delivery.ok, "body": result["body"], "delivery": asdict(delivery)})
