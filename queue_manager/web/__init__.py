"""The surfaces people see: the waiting page, the script tag, the small refusal pages."""
