"""`stategate store`: serve the snapshot store over HTTP to nodes on other machines.

Nodes pull GET /manifest.json and GET /<partition folder>/<version file> with the cluster
secret; every file a node installs is checked against the manifest's sha256 first, so this
server only has to be reachable, not trusted with integrity.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from gateway.config import Project
from gateway.protocol import SECRET_HEADER


def create_store_app(project: Project) -> Starlette:
    root = Path(project.snapshot_store).resolve()
    secret = project.cluster.secret.encode()

    async def serve(request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, secret):
            return JSONResponse(
                {"error": {"code": "UNAUTHENTICATED", "message": f"{SECRET_HEADER} is wrong"}},
                status_code=401,
            )
        path = (root / request.path_params["path"]).resolve()
        if root not in path.parents or path.name.startswith(".") or not path.is_file():
            return JSONResponse(
                {"error": {"code": "NOT_FOUND", "message": "no such file in the store"}},
                status_code=404,
            )
        return FileResponse(path)

    return Starlette(routes=[Route("/{path:path}", serve)])
