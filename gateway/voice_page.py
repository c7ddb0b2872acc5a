"""GET /: the voice page (gateway/static: plain HTML and JavaScript, no build step), which
talks to /v1/realtime from a browser; /static/* its script and audio worklet."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
router = APIRouter()


@router.get("/", include_in_schema=False)
async def voice_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC)
