"""Two `flowmem serve` instances on one memory, driven by the official `mcp` Python SDK.

Used by crates/cli/tests/it/shared_memory.rs. Reads a program as JSON from its first
argument: {"a": URL, "b": URL, "token": TOKEN, "rounds": N}. Opens one session to each
server, then, each round, reports a new run through A (`report_run`) and measures, from
the moment A answered:
  - whether B's very next `find_workflows` finds the workflow A stored ("found_first"),
    and how long until B found it ("find_ms"; it searches again for up to 5 s);
  - how long until B's session got `notifications/tools/list_changed`
    ("list_changed_ms", null when none came within 20 s).
Prints {"rounds": [{"id", "found_first", "find_ms", "list_changed_ms"}, ...]} or
{"error": ...}.
"""

import json
import sys
import time
import traceback

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def messages(n):
    """A two-call run with tools no other round uses, so each round stores a workflow."""
    def call(cid, name, args):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [
        {"role": "user", "content": f"Reserve hangar {n} for the glider club"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", f"find_hangar_{n}", {"club": "glider"})]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"hangar_id": f"h-{n}"})},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c2", f"reserve_hangar_{n}", {"hangar_id": f"h-{n}"})]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"reservation": f"r-{n}"})},
        {"role": "assistant", "content": f"Reserved: r-{n}."},
    ]


async def main(program):
    changed = {"at": None}

    async def on_b_message(message):
        method = str(getattr(message, "method", None) or type(message).__name__)
        if ("list_changed" in method or "ToolListChanged" in method) and changed["at"] is None:
            changed["at"] = time.monotonic()

    headers = {"Authorization": f"Bearer {program['token']}"}
    rounds = []
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0)) as http_a, \
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0)) as http_b:
        async with streamable_http_client(program["a"], http_client=http_a) as (read_a, write_a, *_), \
                streamable_http_client(program["b"], http_client=http_b) as (read_b, write_b, *_):
            async with ClientSession(read_a, write_a) as a, \
                    ClientSession(read_b, write_b, message_handler=on_b_message) as b:
                await a.initialize()
                await b.initialize()
                await b.list_tools()
                for n in range(program["rounds"]):
                    changed["at"] = None
                    reported = await a.call_tool("report_run", {"messages": messages(n), "outcome": True})
                    answered = time.monotonic()
                    stored = (reported.structured_content or {}).get("stored") or []
                    if reported.is_error or len(stored) != 1:
                        text = "\n".join(getattr(block, "text", "") for block in reported.content)
                        return {"error": f"round {n}: report_run stored {stored}: {text}"}
                    new_id = stored[0]["id"]
                    found_first, find_ms = None, None
                    while time.monotonic() - answered < 5.0:
                        found = await b.call_tool("find_workflows", {"task": f"reserve hangar {n} glider club", "k": 3})
                        ids = [w["id"] for w in (found.structured_content or {}).get("workflows", [])]
                        if found_first is None:
                            found_first = new_id in ids
                        if new_id in ids:
                            find_ms = (time.monotonic() - answered) * 1000.0
                            break
                    with anyio.move_on_after(20):
                        while changed["at"] is None:
                            await anyio.sleep(0.005)
                    list_changed_ms = None if changed["at"] is None else (changed["at"] - answered) * 1000.0
                    rounds.append({"id": new_id, "found_first": found_first, "find_ms": find_ms,
                                   "list_changed_ms": list_changed_ms})
    return {"rounds": rounds}


if __name__ == "__main__":
    try:
        document = anyio.run(main, json.loads(sys.argv[1]))
    except BaseException as exc:
        document = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    print(json.dumps(document))
