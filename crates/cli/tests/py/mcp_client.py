"""An MCP client flowmem did not write: the official `mcp` Python SDK.

Used by the `flowmem serve` integration tests (crates/cli/tests/it/serve.rs). It reads a
program as JSON from its first argument, connects over streamable HTTP or stdio, runs
the program's steps in order, and prints one JSON document on stdout:
{"steps": [...one result per step...], "notifications": [...method names...]}.

Program: {"transport": "http", "url": URL, "token": TOKEN?}
      or {"transport": "stdio", "command": PATH, "args": [...], "env": {...}, "cwd": DIR}
      or {"transport": "probe", "url": URL, "token": TOKEN?}: POST one `initialize` with
         httpx2 (the SDK's HTTP client) and print {"status", "www_authenticate", "body"},
         because the SDK reports a refused session without its status code
and "steps": a list of
  {"op": "list_tools"}                       -> {"tools": [{"name", "description", "input_schema"}]}
  {"op": "call", "name": N, "args": {...}}   -> {"is_error", "text", "structured"}
  {"op": "wait_list_changed", "timeout": S}  -> {"seen": bool}: a notification since the
                                                last wait that saw one
  {"op": "run", "argv": [...]}               -> {"code", "stdout", "stderr"}: runs a command
                                                (such as the flowmem CLI) mid-session
A step that raises gives {"error": "..."}; the program goes on. When every step ran and
only closing the session failed, the document says so in "close_error".
"""

import json
import sys
import traceback

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def describe(exc):
    """The messages of an exception and of the exceptions inside it."""
    parts = [f"{type(exc).__name__}: {exc}"]
    for inner in getattr(exc, "exceptions", []) or []:
        parts.append(describe(inner))
    if exc.__cause__ is not None:
        parts.append(describe(exc.__cause__))
    return " | ".join(parts)


async def run_steps(session, steps, results, changed):
    for step in steps:
        try:
            op = step["op"]
            if op == "list_tools":
                listed = await session.list_tools()
                results.append({"tools": [
                    {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                    for t in listed.tools]})
            elif op == "call":
                result = await session.call_tool(step["name"], step.get("args", {}))
                text = "\n".join(getattr(block, "text", "") for block in result.content)
                results.append({"is_error": bool(result.is_error), "text": text,
                                "structured": result.structured_content})
            elif op == "wait_list_changed":
                with anyio.move_on_after(step.get("timeout", 10)):
                    await changed["event"].wait()
                seen = changed["event"].is_set()
                if seen:
                    changed["event"] = anyio.Event()
                results.append({"seen": seen})
            elif op == "run":
                done = await anyio.run_process(step["argv"], check=False)
                results.append({"code": done.returncode, "stdout": done.stdout.decode(errors="replace"),
                                "stderr": done.stderr.decode(errors="replace")})
            else:
                results.append({"error": f"unknown op {op}"})
        except Exception as exc:  # report and go on: the test asserts on it
            results.append({"error": describe(exc)})
    return results


async def probe(program):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if program.get("token"):
        headers["Authorization"] = f"Bearer {program['token']}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    async with httpx2.AsyncClient(timeout=30.0) as http:
        response = await http.post(program["url"], headers=headers, json=initialize)
        return {"status": response.status_code, "www_authenticate": response.headers.get("www-authenticate"),
                "body": response.text}


async def main(program, results, notifications):
    # Replaced by each wait that saw it set, so the next wait needs a new notification.
    changed = {"event": anyio.Event()}

    async def on_message(message):
        if isinstance(message, Exception):
            notifications.append(f"exception: {message}")
            return
        method = getattr(message, "method", None) or type(message).__name__
        notifications.append(method)
        if "list_changed" in str(method) or "ToolListChanged" in str(method):
            changed["event"].set()

    async def with_streams(read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            await run_steps(session, program["steps"], results, changed)

    if program["transport"] == "probe":
        return await probe(program)
    if program["transport"] == "http":
        headers = {}
        if program.get("token"):
            headers["Authorization"] = f"Bearer {program['token']}"
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0)) as http:
            async with streamable_http_client(program["url"], http_client=http) as streams:
                await with_streams(streams[0], streams[1])
    else:
        params = StdioServerParameters(command=program["command"], args=program.get("args", []),
                                       env=program.get("env"), cwd=program.get("cwd"))
        async with stdio_client(params) as streams:
            await with_streams(streams[0], streams[1])
    return {"steps": results, "notifications": notifications}


if __name__ == "__main__":
    program = json.loads(sys.argv[1])
    results, notifications = [], []
    try:
        document = anyio.run(main, program, results, notifications)
    except BaseException as exc:  # the session failed: say why, as JSON
        document = {"error": describe(exc), "traceback": traceback.format_exc()}
        if len(results) == len(program.get("steps", [])) and results:
            # Every step ran; only closing the session failed (the server had stopped).
            document = {"steps": results, "notifications": notifications, "close_error": document["error"]}
    print(json.dumps(document))
