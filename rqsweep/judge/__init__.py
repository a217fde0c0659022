"""A judge: a chat-completions endpoint the team runs (Ollama, vLLM, a provider) that grades (query, item) pairs.

    client.py   one endpoint: send a prompt, get its text and the tokens it cost (`ChatClient.ask`)
    grading.py  the grading prompt, the answer's grade, the cache per (query, item, model, prompt), the budget,
                and the agreement with people (Cohen's kappa)

Never required: `judge:` in the config turns it on for `rqsweep pool` (`rqsweep.report.pool`).
"""

from rqsweep.judge.client import ChatClient, Reply

__all__ = ["ChatClient", "Reply"]
