"""tests/sample_plugin.py's tenant route: importing this module imports FastAPI."""

from fastapi import APIRouter

router = APIRouter()


@router.get("/sample/hello")
async def hello() -> dict[str, str]:
    return {"hello": "tenant"}
