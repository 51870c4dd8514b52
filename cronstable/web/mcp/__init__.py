"""The Model Context Protocol endpoint, ``/mcp`` on the web listeners (``web.mcp``).

:mod:`~cronstable.web.mcp.endpoint` is the route and its checks,
:mod:`~cronstable.web.mcp.tools` and :mod:`~cronstable.web.mcp.schemas` the tools
(each answers what an HTTP route answers, through :mod:`cronstable.web.calls`), and
:mod:`~cronstable.web.mcp.asgi` the bridge to the MCP SDK, the one module that imports
it, loaded only once a revision enables MCP.
"""
