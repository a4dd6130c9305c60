"""`stategate store`: serve the snapshot store over HTTP to nodes on other machines.

Nodes pull GET /manifest.json and GET /<partition folder>/<version file> with the cluster
secret; every file a node installs is checked against the manifest's sha256 first, so this
server only has to be reachable, not trusted with integrity. GET /health needs no secret.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from contracts.cluster_secret import SECRET_HEADER, is_authentic
from contracts.errors import error_document
from contracts.manifest import FILE_NAME
from contracts.project import Project


def create_store_app(project: Project) -> Starlette:
    root = Path(project.snapshot_store).resolve()
    secret = project.cluster.secret

    async def serve(request: Request) -> Response:
        if not is_authentic(request.headers.get(SECRET_HEADER), secret):
            body = error_document("UNAUTHENTICATED", f"{SECRET_HEADER} is missing or wrong")
            return JSONResponse(body, status_code=401)
        path = (root / request.path_params["path"]).resolve()
        if not _servable(root, path):
            return JSONResponse(error_document("NOT_FOUND", "no such file in the store"), 404)
        if path.name == FILE_NAME:  # replaced as the pipeline publishes: read from one open
            return Response(path.read_bytes(), media_type="application/json")
        return FileResponse(path)  # a layer never changes at its path

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/health", health), Route("/{path:path}", serve)])


def _servable(root: Path, path: Path) -> bool:
    """A file inside the store and outside its hidden folders (names starting with a dot)."""
    if root not in path.parents or not path.is_file():
        return False
    return not any(part.startswith(".") for part in path.relative_to(root).parts)
