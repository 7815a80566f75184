"""The pages and files a browser loads: the waiting page, the console, the guides, brands, connectors."""
