"""Who a request is and what it may do: keys, operators, console sessions, monitor links, audit, protection."""
