"""An OpenAI-compatible chat completions client, with httpx. Dormant unless LLM_BASE_URL
and LLM_MODEL are set (LLM_API_KEY is sent as a bearer token when set: local servers
often need none). A 429 (or 503 with Retry-After) defers the job; any other failure is
a failure of the job, retried with backoff."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx

from app.outreach.web import RATE_LIMIT_DEFAULT, RateLimited, retry_after


class LlmError(Exception):
    """The endpoint failed, or answered something that is not a chat completion."""


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


async def chat(settings, messages: list[dict[str, str]], *, max_tokens: int = 400,
               temperature: float = 0.7) -> Completion:
    url = settings.llm_base_url.rstrip("/") + "/chat/completions"
    headers = {"User-Agent": settings.fetch_user_agent}
    if settings.llm_api_key:
        headers["Authorization"] = f"Bearer {settings.llm_api_key}"
    body = {"model": settings.llm_model, "messages": messages, "max_tokens": max_tokens,
            "temperature": temperature}
    timeout = settings.llm_timeout_seconds
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=httpx.Timeout(timeout)) as client:
            r = await client.post(url, json=body, headers=headers)
    except TimeoutError:
        raise LlmError(f"the LLM did not answer within {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise LlmError(f"the LLM at {url} is unreachable: {type(exc).__name__}: {exc}".rstrip(": ")) from None
    if r.status_code == 429 or (r.status_code == 503 and r.headers.get("retry-after")):
        delay = retry_after(r.headers.get("retry-after")) or RATE_LIMIT_DEFAULT
        raise RateLimited(delay, f"the LLM is rate-limiting (HTTP {r.status_code})")
    if r.status_code >= 400:
        raise LlmError(f"the LLM answered HTTP {r.status_code}: {r.text[:300]}")
    try:
        data = r.json()
        text = data["choices"][0]["message"]["content"]
        usage = data.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError, json.JSONDecodeError):
        raise LlmError(f"the LLM's answer is not a chat completion: {r.text[:300]}") from None
    if not isinstance(text, str) or not text.strip():
        raise LlmError("the LLM answered with an empty message")
    return Completion(text.strip(), str(data.get("model") or settings.llm_model), prompt, completion)
