"""The OpenAI wire format as `ascent serve` speaks it: request checks, responses, SSE chunks.

Refused requests become OpenAI-style error objects (`{"error": {"message", "type", "param",
"code"}}`), with the same wording as OpenAI for an over-long request or a missing parameter, so
clients (and `ascent.api.diagnoses`) recognise them. Every field a request needs is checked
here, before anything reaches the model: an empty body, a missing `model`, a message without
`content` or an empty prompt is a 400 naming the field, never a 500 from deep in generation.

A request without `max_tokens` may use the rest of the model's context, as with OpenAI; for a
model without a context limit it gets `DEFAULT_MAX_TOKENS`. `n` (choices per request) is at
most `MAX_N`: each choice is one more prompt in the batch.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ascent.serve.batching import Generation, GenParams


class RequestError(Exception):
    """A request the server refuses, answered as an OpenAI-style error object."""

    def __init__(
        self, status: int, message: str, code: str | None = None, param: str | None = None
    ):
        super().__init__(message)
        self.status, self.code, self.param = status, code, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {
            "error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}
        }


DEFAULT_MAX_TOKENS = 256  # max_tokens when a request names none and the context is unbounded
MAX_N = 128  # most choices one request may ask for (OpenAI's own limit)

UNSUPPORTED = ("logprobs", "top_logprobs", "tools", "functions", "response_format", "echo")


def json_object(raw: bytes) -> dict[str, Any]:
    """The request body, which must be a JSON object."""
    if not raw.strip():
        raise RequestError(
            400,
            "the request body is empty; send a JSON object such as "
            '{"model": "...", "messages": [{"role": "user", "content": "..."}]}',
        )
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as err:  # bad JSON, bytes that are not UTF-8, deep nesting
        raise RequestError(400, f"invalid JSON body: {err}") from None
    if not isinstance(body, dict):
        raise RequestError(
            400, f"the request body must be a JSON object, not a JSON {_json_kind(body)}"
        )
    return body


def check_model(body: dict[str, Any], served: str) -> None:
    """400 without a `model`; 404 (`model_not_found`) for one this server does not serve."""
    model = body.get("model")
    if model is None:
        raise RequestError(
            400,
            f"Missing required parameter: 'model' (this server serves `{served}`)",
            param="model",
        )
    if model != served:
        raise RequestError(
            404,
            f"The model `{model}` does not exist; this server serves `{served}`",
            code="model_not_found",
            param="model",
        )


def chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    """`messages` as `{"role", "content"}` with string contents (text parts joined); a missing
    or malformed message is refused with the field named, as `messages[2].content`."""
    messages = body.get("messages")
    if messages is None:
        raise RequestError(400, "Missing required parameter: 'messages'", param="messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(
            400,
            '\'messages\' must be a non-empty list of {"role", "content"} objects',
            param="messages",
        )
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def _message(message: Any, where: str) -> dict[str, str]:
    if not isinstance(message, dict):
        raise RequestError(
            400, f"'{where}' must be an object with 'role' and 'content'", param=where
        )
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise RequestError(
            400, f"'{where}.role' must be a string such as \"user\"", param=f"{where}.role"
        )
    return {"role": role, "content": _text(message.get("content"), f"{where}.content")}


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of `{"type": "text", "text": ...}` parts."""
    if content is None:
        raise RequestError(400, f"Missing required parameter: '{where}'", param=where)
    if isinstance(content, list) and content and all(_is_text_part(p) for p in content):
        return "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise RequestError(
            400,
            f"'{where}' must be a string or a list of text parts, not a JSON {_json_kind(content)}",
            param=where,
        )
    return content


def _is_text_part(part: Any) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def completion_prompt(body: dict[str, Any]) -> str:
    """`prompt`: one non-empty string (a list holding one string is accepted)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if prompt is None:
        raise RequestError(400, "Missing required parameter: 'prompt'", param="prompt")
    if isinstance(prompt, list):
        raise RequestError(
            400,
            f"'prompt' must be one string; send one request per prompt ({len(prompt)} given)",
            param="prompt",
        )
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(400, "'prompt' must be a non-empty string", param="prompt")
    return prompt


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def check_supported(body: dict[str, Any]) -> None:
    for key in UNSUPPORTED:
        if body.get(key) not in (None, False, [], 0):
            raise RequestError(400, f"'{key}' is not supported by ascent serve", param=key)


def sampling_params(body: dict[str, Any], prompt_tokens: int, limit: int | None) -> GenParams:
    """The request's sampling settings, refused with OpenAI's wording when they cannot work."""
    room = None if limit is None else limit - prompt_tokens
    if room is not None and room < 1:
        raise RequestError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
            param="messages",
        )
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = int_param(body, key, room if room is not None else DEFAULT_MAX_TOKENS, low=1)
    if room is not None and max_tokens > room:
        raise RequestError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            code="context_length_exceeded",
            param=key,
        )
    temperature = num_param(body, "temperature", 1.0, low=0.0, high=2.0)
    top_p = num_param(body, "top_p", 1.0, low=0.0, high=1.0)
    if top_p == 0:
        raise RequestError(400, "'top_p' must be in (0, 1]", param="top_p")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError(400, "'stop' must be a string or a list of strings", param="stop")
    return GenParams(max_tokens, temperature, top_p, tuple(stop))


def choices_param(body: dict[str, Any]) -> int:
    """`n`, the number of choices: 1 unless asked, never more than `MAX_N`."""
    return int_param(body, "n", 1, low=1, high=MAX_N)


def int_param(
    body: dict[str, Any], key: str, default: int, low: int, high: int | None = None
) -> int:
    value = body.get(key)
    if value is None:
        return default
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not is_int or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(400, f"'{key}' must be an integer {bound}", param=key)
    return value


def num_param(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise RequestError(400, f"'{key}' must be a number in [{low:g}, {high:g}]", param=key)
    return float(value)


def completion_response(model: str, outs: list[Generation], chat: bool) -> dict[str, Any]:
    prompt_tokens = outs[0].prompt_tokens
    completion_tokens = sum(o.completion_tokens for o in outs)
    if chat:
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": o.text},
                "finish_reason": o.finish_reason,
                "logprobs": None,
            }
            for i, o in enumerate(outs)
        ]
    else:
        choices = [
            {"index": i, "text": o.text, "finish_reason": o.finish_reason, "logprobs": None}
            for i, o in enumerate(outs)
        ]
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_events(response: dict[str, Any], chat: bool) -> list[dict[str, Any]]:
    """The whole answer as SSE chunks: content in one chunk, then the finish reason."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    base = {k: response[k] for k in ("id", "created", "model")} | {"object": obj}
    events = []
    for choice in response["choices"]:
        i = choice["index"]
        if chat:
            delta = {"role": "assistant", "content": choice["message"]["content"]}
            events.append(base | {"choices": [{"index": i, "delta": delta, "finish_reason": None}]})
            done = {"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}
        else:
            done = {"index": i, "text": choice["text"], "finish_reason": choice["finish_reason"]}
        events.append(base | {"choices": [done]})
    events[-1] = events[-1] | {"usage": response["usage"]}
    return events
