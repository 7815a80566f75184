"""Queue Manager in front of a Python web app: ASGI and WSGI middleware (Django, Flask, FastAPI, Starlette).

    from qm_gate import QueueGateASGI, QueueGateWSGI

See the package README for the options and what the gate does per request.
"""

from qm_gate._gate import VERSION
from qm_gate._passes import available as edge_passes_available
from qm_gate.asgi import QueueGateASGI
from qm_gate.wsgi import QueueGateWSGI

__all__ = ["VERSION", "QueueGateASGI", "QueueGateWSGI", "edge_passes_available"]
