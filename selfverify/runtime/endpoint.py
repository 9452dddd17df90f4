"""A :class:`~selfverify.runtime.textgen.TextModel` served elsewhere: any OpenAI-compatible HTTP endpoint
(``vllm serve``, DeepSeek's API, ...), through the official ``openai`` package (``selfverify[endpoint]``).

Test-time search runs a model too large for this machine this way. One request per prompt, at most
``concurrency`` in flight. A request that still fails after the client's retries (a timeout, a 5xx, a
4xx such as a prompt over the context length) becomes a :class:`Completion` with ``error`` set, which the
caller counts: one bad request never stops a run of thousands. An endpoint that cannot serve at all
(every request of a call refused, no usage reported, the model not served) raises :class:`EndpointError`
instead, a one-line message the CLI prints before exiting non-zero.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from selfverify.runtime.textgen import Completion

if TYPE_CHECKING:
    from openai import AsyncOpenAI

T = TypeVar("T")

# Longest reason kept in a Completion's ``error``: a record per failure, not the server's whole message.
REASON_CHARS = 200


class EndpointError(RuntimeError):
    """The endpoint cannot serve the model at all (down, unreachable, refusing us, serving other models):
    the message names the URL, for the CLI to print as it exits non-zero."""


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` from synchronous code; from inside a running loop (a notebook, an async caller) in
    a thread of its own, since a loop cannot be run inside another."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _refused(err: Exception) -> bool:
    """No connection at all (refused, no such host), as against a timeout or an answer with an error."""
    import openai

    return isinstance(err, openai.APIConnectionError) and not isinstance(err, openai.APITimeoutError)


def _reason(err: Exception) -> str:
    """A short, one-line reason for a failed request: the status and the server's own message."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return "timeout"
    if isinstance(err, openai.APIStatusError):
        body = err.body
        message = body.get("message") if isinstance(body, dict) else None
        text = f"HTTP {err.status_code}: {message if isinstance(message, str) else err.message}"
    elif isinstance(err, openai.APIConnectionError):
        text = f"connection error: {err.__cause__ or err.message}"
    else:
        text = f"{type(err).__name__}: {err}"
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


@dataclass
class EndpointModel:
    """A model at ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``) served under the name ``model``.

    ``api_key``: ``None`` reads ``$OPENAI_API_KEY`` (``EMPTY`` when unset); vLLM accepts any key unless
    started with ``--api-key``. ``chat``: ``False`` sends the prompt text as it is to ``/completions``
    (our prompts are already formatted); ``True`` sends it as one user message to ``/chat/completions``,
    where the server applies the model's chat template. ``timeout_s`` bounds each request, ``retries``
    is the openai client's ``max_retries`` (with backoff, on connection errors, timeouts, 408, 409, 429
    and 5xx)."""

    base_url: str
    model: str
    api_key: str | None = "EMPTY"
    chat: bool = False
    concurrency: int = 8
    timeout_s: float = 120.0
    retries: int = 2

    def _client(self) -> AsyncOpenAI:
        """A new client for each event loop: its connection pool belongs to the loop that made it, and
        every ``asyncio.run`` is a new loop."""
        try:
            from openai import AsyncOpenAI
        except ImportError:
            raise EndpointError(
                "an endpoint needs the openai package: pip install 'selfverify[endpoint]'"
            ) from None
        key = self.api_key if self.api_key is not None else os.environ.get("OPENAI_API_KEY", "EMPTY")
        return AsyncOpenAI(
            base_url=self.base_url, api_key=key, max_retries=self.retries, timeout=self.timeout_s
        )

    def _failure(self, err: Exception) -> str:
        """Why the endpoint as a whole cannot be used, in one line naming its URL."""
        if _refused(err):
            return f"endpoint {self.base_url} is unreachable (down, or a wrong URL): {_reason(err)}"
        missing = getattr(err, "status_code", 0) == 404
        hint = " (is it the API's base URL, e.g. ending in /v1?)" if missing else ""
        return f"endpoint {self.base_url} failed: {_reason(err)}{hint}"

    def check(self) -> list[str]:
        """One cheap call before the work starts: the endpoint answers and serves ``model``. Returns the
        served models' names; raises :class:`EndpointError` otherwise."""
        return _run(self._check())

    async def _check(self) -> list[str]:
        import openai

        async with self._client() as client:
            try:
                served = [m.id async for m in client.models.list()]
            except openai.APIError as err:
                raise EndpointError(self._failure(err)) from None
        if self.model not in served:
            raise EndpointError(
                f"endpoint {self.base_url} does not serve model {self.model!r}; it serves: "
                + (", ".join(served) or "nothing")
            )
        return served

    def complete(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        greedy: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> list[Completion]:
        """One completion per prompt, in order; prompt i is seeded ``seed + i`` (vLLM honours it, so a
        rerun samples the same texts). Raises :class:`EndpointError` when every request of the call
        failed to connect: the endpoint is down, and counting each prompt as a failure would hide it."""
        if not prompts:
            return []
        out = _run(self._complete(list(prompts), max_new_tokens, 0.0 if greedy else temperature, seed))
        if all(refused for _, refused in out):
            raise EndpointError(
                f"endpoint {self.base_url} is unreachable (down, or a wrong URL): {out[0][0].error}"
            )
        return [c for c, _ in out]

    async def _complete(
        self, prompts: list[str], max_tokens: int, temperature: float, seed: int
    ) -> list[tuple[Completion, bool]]:
        """Each prompt's completion and whether its request failed to connect at all."""
        import openai

        gate = asyncio.Semaphore(max(self.concurrency, 1))

        async def one(client: AsyncOpenAI, i: int, prompt: str) -> tuple[Completion, bool]:
            args: dict[str, Any] = {
                "model": self.model,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": seed + i,
                "n": 1,
            }
            async with gate:
                try:
                    if self.chat:
                        r = await client.chat.completions.create(
                            messages=[{"role": "user", "content": prompt}], **args
                        )
                        text = r.choices[0].message.content or ""
                    else:
                        r = await client.completions.create(prompt=prompt, **args)
                        text = r.choices[0].text
                except openai.APIError as err:
                    return Completion("", 0, error=_reason(err)), _refused(err)
            if r.usage is None:
                raise EndpointError(
                    f"endpoint {self.base_url} reports no token usage for model {self.model!r}: "
                    "the search's token counts need it"
                )
            return Completion(text, r.usage.completion_tokens), False

        async with self._client() as client:
            return await asyncio.gather(*(one(client, i, p) for i, p in enumerate(prompts)))
