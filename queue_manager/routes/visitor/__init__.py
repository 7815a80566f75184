"""The visitor API: joining, status and streams, the door check, a drop's draw, turn e-mails."""
