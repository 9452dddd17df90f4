"""The endpoint model against vLLM's own OpenAI-compatible server (its CPU build, on loopback, serving a
tiny model of ours): completions in order with their token counts, greedy and seeded answers that
repeat, bounded concurrency, chat mode, the key; a request that fails is one failed completion, an
endpoint that is down or serves another model is an :class:`EndpointError` naming its URL.

vLLM's environment: the ``vllm_python`` fixture (conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from selfverify.config.schema import ModelSpec
from selfverify.runtime.endpoint import EndpointError, EndpointModel
from selfverify.runtime.engines import free_port
from selfverify.runtime.workers import build

# Head size 32: vLLM's CPU attention has no kernel for smaller heads.
SPEC = ModelSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
MAX_MODEL_LEN = 128  # a longer prompt is a 400 from vLLM
KEY = "sv-test-key"  # the server requires it: the key must reach it
# The tiny tokenizer has no chat template; this one passes the user's message through unchanged, so chat
# mode must answer as the completions API does on the same text.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
PROMPTS = ["Q:1+2\n", "Q:5-3-1\n", "Q:7+1\n", "Q:9-4\n"]
START_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def server(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server on a tiny model of ours, started once for the module; its base URL."""
    root = tmp_path_factory.mktemp("endpoint")
    build(SPEC, seed=0).save(root / "model")  # weights, config and tokenizer
    (root / "chat.jinja").write_text(CHAT_TEMPLATE)
    port = free_port()
    command = [
        vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(root / "model"),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--api-key", KEY,
        "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager", "--seed", "0",
        "--chat-template", str(root / "chat.jinja"),
    ]  # fmt: skip
    # A small KV cache: by default vLLM's CPU build fills most of the memory with it, taking a minute.
    env = os.environ | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = root / "server.log"
    with log.open("wb") as out:
        # A session of its own: the API server and its engine process stop together.
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            assert process.poll() is None, f"vLLM's server exited ({process.returncode}):\n{tail}"
            assert time.monotonic() < deadline, f"vLLM's server not ready in {START_TIMEOUT_S} s:\n{tail}"
            request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {KEY}"})
            try:
                with urllib.request.urlopen(request, timeout=5):
                    break
            except (urllib.error.URLError, OSError):
                time.sleep(1)
        yield url
    finally:
        with_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with_group(process, signal.SIGKILL)
            process.wait()


def with_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    """``sig`` to the server's process group (its own session: only what it started)."""
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(process.pid, sig)


def test_completions_come_back_in_order_with_their_tokens(server: str) -> None:
    model = EndpointModel(server, "tiny", api_key=KEY)
    assert model.check() == ["tiny"]
    out = model.complete(PROMPTS, max_new_tokens=8, seed=3)
    assert len(out) == len(PROMPTS) and all(c.error is None for c in out)
    assert all(0 < c.tokens <= 8 for c in out)
    # Prompt i is seeded 3 + i: the same call samples the same texts, and one prompt alone (as the
    # first of its call) samples its text of the call seeded 3 + i, whatever else was in flight.
    assert [c.text for c in model.complete(PROMPTS, max_new_tokens=8, seed=3)] == [c.text for c in out]
    assert model.complete(PROMPTS[2:3], max_new_tokens=8, seed=5)[0].text == out[2].text
    assert model.complete(PROMPTS, max_new_tokens=8, seed=4)[0].text != out[0].text

    greedy = model.complete(PROMPTS, max_new_tokens=8, greedy=True, seed=1)
    again = model.complete(PROMPTS, max_new_tokens=8, greedy=True, seed=2)
    assert [c.text for c in greedy] == [c.text for c in again] and all(c.error is None for c in again)

    chat = EndpointModel(server, "tiny", api_key=KEY, chat=True).complete(
        PROMPTS, max_new_tokens=8, greedy=True
    )
    assert [(c.text, c.tokens) for c in chat] == [(c.text, c.tokens) for c in greedy]


def test_six_prompts_two_requests_at_a_time(server: str) -> None:
    model = EndpointModel(server, "tiny", api_key=KEY, concurrency=2)
    out = model.complete(PROMPTS + PROMPTS[:2], max_new_tokens=6, greedy=True)
    assert len(out) == 6 and all(c.error is None and 0 < c.tokens <= 6 for c in out)
    assert [c.text for c in out[4:]] == [c.text for c in out[:2]]

    async def from_a_running_loop() -> list[str]:  # a loop is running: the call takes a thread
        return [c.text for c in model.complete(PROMPTS[:2], max_new_tokens=6, greedy=True)]

    assert asyncio.run(from_a_running_loop()) == [c.text for c in out[:2]]


def test_a_failed_request_is_one_failed_completion(server: str) -> None:
    model = EndpointModel(server, "tiny", api_key=KEY)
    long = "1+" * MAX_MODEL_LEN  # over the context length: vLLM answers 400, never retried
    out = model.complete([PROMPTS[0], long, PROMPTS[1]], max_new_tokens=8, greedy=True)
    assert out[1].text == "" and out[1].tokens == 0
    assert (
        out[1].error is not None and out[1].error.startswith("HTTP 400") and "context length" in out[1].error
    )
    assert all(c.error is None and c.tokens > 0 for c in (out[0], out[2]))


def test_the_key_reaches_the_server(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``api_key=None`` reads $OPENAI_API_KEY; a wrong key is refused by the check, naming the URL."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert EndpointModel(server, "tiny", api_key=None).check() == ["tiny"]
    with pytest.raises(EndpointError, match=f"endpoint {server} failed: HTTP 401"):
        EndpointModel(server, "tiny").check()


def test_a_model_not_served_or_a_wrong_url_fails_the_check(server: str) -> None:
    with pytest.raises(EndpointError, match=f"{server} does not serve model 'other'; it serves: tiny$"):
        EndpointModel(server, "other", api_key=KEY).check()
    base = server.removesuffix("/v1")
    with pytest.raises(EndpointError, match=f"{base} failed: HTTP 404.*ending in /v1"):
        EndpointModel(base, "tiny", api_key=KEY).check()


def test_an_unreachable_endpoint_is_an_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = EndpointModel(url, "tiny", retries=0, timeout_s=5)
    start = time.monotonic()
    with pytest.raises(EndpointError, match=f"endpoint {url} is unreachable"):
        model.complete(PROMPTS, max_new_tokens=8)
    with pytest.raises(EndpointError, match=f"endpoint {url} is unreachable"):
        model.check()
    assert time.monotonic() - start < 10
