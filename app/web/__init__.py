"""The web layer: FastAPI routes and pages. It never imports torch."""
