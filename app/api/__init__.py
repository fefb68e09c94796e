"""The HTTP adapter: FastAPI routers over the pipeline. `create_app(settings, stages)`."""

from app.api.main import create_app

__all__ = ["create_app"]
