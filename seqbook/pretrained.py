"""Pretrained GPT-2 weights from the Hugging Face hub, found locally first and never waited on.

:func:`load_pretrained_gpt2` returns Hugging Face's model and tokenizer;
:meth:`seqbook.gpt.GPT.from_hf` copies the model into the book's GPT.
"""

from __future__ import annotations

from .checks import check_number

__all__ = ["PretrainedUnavailable", "load_pretrained_gpt2"]


class PretrainedUnavailable(RuntimeError):
    """Pretrained weights could not be had here; the message says why (no package, no network, ...)."""


def _hub_reachable(seconds: float) -> bool:
    """Whether the model hub answers an HTTPS request within ``seconds`` (``HF_HUB_OFFLINE=1``: no,
    at once). The request runs in a daemon thread, so even a stuck DNS lookup cannot hang the caller."""
    import threading
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    reached = []

    def probe():
        try:
            request = urllib.request.Request(constants.ENDPOINT, method="HEAD")
            urllib.request.urlopen(request, timeout=seconds).close()
            reached.append(True)
        except urllib.error.HTTPError:  # the hub answered, if only with an error page
            reached.append(True)
        except (OSError, ValueError):  # no route, no DNS, a proxy that breaks TLS, ...
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(reached)


def load_pretrained_gpt2(name: str = "gpt2", timeout: float = 3.0):
    """The pretrained Hugging Face GPT-2 ``name`` and its tokenizer: ``(GPT2LMHeadModel, tokenizer)``,
    from the local cache if it is there, else downloaded (once) from the model hub.

    Never waits more than about ``timeout`` seconds for a hub that does not answer. Copy the model
    into this package's GPT with :meth:`seqbook.gpt.GPT.from_hf`.

    Raises:
        PretrainedUnavailable: ``transformers`` is missing, or the weights are neither cached nor
            downloadable; the message says which.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str such as 'gpt2', got {name!r}")
    timeout = check_number("timeout", timeout, low=0.0, low_open=True)
    try:
        from transformers import GPT2LMHeadModel, GPT2TokenizerFast
    except ImportError:
        raise PretrainedUnavailable("transformers is not installed (pip install 'seqbook[hf]')") from None

    def load(local: bool):
        model = GPT2LMHeadModel.from_pretrained(name, local_files_only=local).eval()
        return model, GPT2TokenizerFast.from_pretrained(name, local_files_only=local)

    try:
        return load(local=True)  # the local cache first: it needs no network
    except Exception:  # not cached (transformers raises several kinds of error for that)
        pass
    if not _hub_reachable(timeout):
        raise PretrainedUnavailable(f"{name} is not in the local cache and the model hub cannot be reached")
    try:
        return load(local=False)
    except Exception as error:
        why = f"{type(error).__name__}: {error}"
        raise PretrainedUnavailable(f"the download of {name} failed ({why})") from None
