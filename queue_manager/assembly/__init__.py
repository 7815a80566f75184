"""The parts a server is made of, chosen once per store: ``memory_parts`` or ``fleet_parts`` (``build.py``)."""
