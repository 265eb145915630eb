"""Clients flowmem did not write, against its memory gateway: the official `openai`
Python SDK, and the OpenAI Agents SDK (`openai-agents`) with an MCP server as its tool.

Used by crates/cli/tests/it/gateway.rs. It reads a program as JSON from its first
argument and prints one JSON document: {"steps": [...one result per step...]}.

Program: {"base_url": URL (the gateway's /v1), "api_key": KEY, "steps": [...]}, steps:
  {"op": "chat", "messages": [...], "tools"?: [...], "stream"?: bool, "headers"?: {...},
   "extra_body"?: {...}, "user"?: str}
      -> {"message": {...}, "headers": {x-flowmem-*}, "chunks": N}
         or {"error": {"status", "message", "retry_after"}}
  {"op": "loop", "messages": [...], "tools": [...], "results": {tool: text}, "stream"?: bool,
   "headers"?: {...}}: the tool-call loop of a simple agent: while the model calls
      tools, answer each with results[tool], and ask again
      -> {"turns": [{"message", "headers"}], "messages": the whole transcript}
  {"op": "models"}                              -> {"ids": [...]}
  {"op": "embed", "input": str | [...], "model"?: M, "encoding_format"?: "float"|"base64"}
      -> {"vectors": [[...]], "indices": [...], "prompt_tokens": N} (the SDK decodes base64)
  {"op": "end", "conversation": ID, "outcome"?: bool}  -> the JSON reply
  {"op": "wait", "done": N, "timeout": S}       -> the gateway's status once N are done
  {"op": "get", "conversation": ID}             -> the recorded conversation
  {"op": "list"}                                -> the recent recorded conversations
  {"op": "agent", "model": M, "instructions": S, "input": S,
   "mcp": {"command": PATH, "args": [...], "env": {...}}, "headers"?: {...}}: an
      openai-agents Agent over the gateway, with the MCP server's tools
      -> {"final_output", "tool_calls": [{"name", "arguments", "output"}]}
A step that raises gives {"error": {...}}; the program goes on.
"""

import asyncio
import json
import sys
import time

import httpx2 as httpx
import openai


def flowmem_headers(headers):
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-flowmem-")}


def chat(client, step):
    kwargs = {"model": step.get("model", "scripted-model"), "messages": step["messages"]}
    for key in ("tools", "user"):
        if key in step:
            kwargs[key] = step[key]
    if "extra_body" in step:
        kwargs["extra_body"] = step["extra_body"]
    if "headers" in step:
        kwargs["extra_headers"] = step["headers"]
    if step.get("stream"):
        raw = client.chat.completions.with_raw_response.create(stream=True, **kwargs)
        stream = raw.parse()
        content, calls, chunks = "", {}, 0
        for chunk in stream:
            chunks += 1
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                content += delta.content
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                if call.id:
                    slot["id"] += call.id
                if call.function and call.function.name:
                    slot["function"]["name"] += call.function.name
                if call.function and call.function.arguments:
                    slot["function"]["arguments"] += call.function.arguments
        message = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return {"message": message, "headers": flowmem_headers(raw.headers), "chunks": chunks}
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    completion = raw.parse()
    message = completion.choices[0].message.model_dump(exclude_none=True)
    return {"message": message, "headers": flowmem_headers(raw.headers), "chunks": 0}


def tool_loop(client, step):
    messages = list(step["messages"])
    turns = []
    for _ in range(step.get("max_turns", 8)):
        turn = chat(client, {**step, "messages": messages})
        turns.append(turn)
        message = turn["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            break
        for call in calls:
            name = call["function"]["name"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": step["results"].get(name, "{}")})
    return {"turns": turns, "messages": messages}


def api_error(exc):
    if isinstance(exc, openai.APIStatusError):
        return {"status": exc.status_code, "message": str(exc), "retry_after": exc.response.headers.get("retry-after")}
    return {"status": None, "message": f"{type(exc).__name__}: {exc}"}


async def agent_run(program, step):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=program["base_url"], api_key=program["api_key"], max_retries=0,
                                default_headers=step.get("headers"))
    params = {"command": step["mcp"]["command"], "args": step["mcp"].get("args", []), "env": step["mcp"].get("env")}
    async with MCPServerStdio(params=params, client_session_timeout_seconds=60, cache_tools_list=True) as server:
        agent = Agent(name="retail-agent", instructions=step["instructions"], mcp_servers=[server],
                      model=OpenAIChatCompletionsModel(model=step["model"], openai_client=client))
        result = await Runner.run(agent, step["input"], max_turns=step.get("max_turns", 8))
    calls, outputs = [], {}
    for item in result.new_items:
        raw = item.raw_item
        kind = type(item).__name__
        if kind == "ToolCallItem":
            calls.append({"call_id": getattr(raw, "call_id", None), "name": getattr(raw, "name", None),
                          "arguments": getattr(raw, "arguments", None)})
        elif kind == "ToolCallOutputItem":
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
            outputs[call_id] = item.output
    for call in calls:
        output = outputs.get(call["call_id"])
        call["output"] = output if isinstance(output, str) else json.dumps(output, default=str)
    return {"final_output": str(result.final_output), "tool_calls": calls}


def main(program):
    client = openai.OpenAI(base_url=program["base_url"], api_key=program["api_key"], max_retries=0)
    http = httpx.Client(base_url=program["base_url"], headers={"Authorization": f"Bearer {program['api_key']}"},
                        timeout=60)
    results = []
    for step in program["steps"]:
        try:
            op = step["op"]
            if op == "chat":
                results.append(chat(client, step))
            elif op == "loop":
                results.append(tool_loop(client, step))
            elif op == "models":
                results.append({"ids": [model.id for model in client.models.list()]})
            elif op == "embed":
                kwargs = {"model": step.get("model", "all-minilm-l6-v2"), "input": step["input"]}
                if "encoding_format" in step:
                    kwargs["encoding_format"] = step["encoding_format"]
                reply = client.embeddings.create(**kwargs)
                results.append({"vectors": [list(item.embedding) for item in reply.data],
                                "indices": [item.index for item in reply.data],
                                "prompt_tokens": reply.usage.prompt_tokens})
            elif op == "end":
                body = {"outcome": step["outcome"]} if "outcome" in step else {}
                reply = http.post(f"/flowmem/conversations/{step['conversation']}/end", json=body)
                results.append({"status": reply.status_code, "body": reply.json()})
            elif op == "wait":
                deadline = time.time() + step.get("timeout", 60)
                status = {}
                while time.time() < deadline:
                    status = http.get("/flowmem/status").json()
                    if status["conversations"]["done"] + status["conversations"]["failed"] >= step["done"]:
                        break
                    time.sleep(0.05)
                results.append(status)
            elif op == "list":
                results.append(http.get("/flowmem/conversations").json())
            elif op == "get":
                reply = http.get(f"/flowmem/conversations/{step['conversation']}")
                results.append({"status": reply.status_code, "body": reply.json()})
            elif op == "agent":
                results.append(asyncio.run(agent_run(program, step)))
            else:
                results.append({"error": {"message": f"unknown op {op}"}})
        except Exception as exc:  # report and go on: the test asserts on it
            results.append({"error": api_error(exc)})
    return {"steps": results}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
