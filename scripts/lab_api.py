"""What the measurement scripts share: a call to a retrylab server's JSON API.

    from lab_api import call   # scripts/ is on the path of a script run as scripts/NAME.py
"""
import json
import urllib.request


def call(base, method, path, body=None, timeout=120):
    """Sends `body` (as JSON, if any) to `base + path`; the answer's JSON, or None when empty."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw else None
