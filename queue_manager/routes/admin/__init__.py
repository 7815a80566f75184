"""The admin API's handlers: rooms, people, the console's reports and stream, alerts, the install verifier."""
