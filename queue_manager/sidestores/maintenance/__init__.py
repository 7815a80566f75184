"""The two maintenance modes of the system surface: journal maintenance (the disk spool) and admission maintenance."""
