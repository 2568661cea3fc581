"""`hf_es.hub.describe_hub_error`: which failure a Hub error is, in one sentence, without the token."""

import pytest
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

from hf_es.hub import describe_hub_error

TOKEN = "hf_" + "DescribeTokenAbCdEfGhIjKlMnOpQr012"


def http_error(status: int) -> HfHubHTTPError:
    import httpx2

    request = httpx2.Request("POST", "https://huggingface.co/api/repos/create")
    return HfHubHTTPError(f"{status} error for {TOKEN}", response=httpx2.Response(status, request=request))


@pytest.mark.parametrize(
    "error, cause",
    [
        (http_error(401), "No Hub token, or an invalid one"),
        (LocalTokenNotFoundError("no token"), "No Hub token, or an invalid one"),
        (http_error(403), "The token has no write permission on the repo me/model"),
        (http_error(404), "The repo me/model does not exist"),
        (http_error(503), "The Hub answered HTTP 503"),
        (ConnectionRefusedError("refused"), "Hub unreachable at "),
        (OfflineModeIsEnabled("offline"), "HF_HUB_OFFLINE=1 is set"),
    ],
    ids=["401", "no-token", "403", "404", "503", "network", "offline"],
)
def test_describe_hub_error_names_the_cause_and_the_intact_local_copy(error, cause):
    message = describe_hub_error(error, repo_id="me/model", local_dir="out")
    assert message.startswith(cause) and message.endswith("The local copy in out is intact; push it again later.")
    assert TOKEN not in message
