"""The signer's prepared HMAC-SHA256 must give exactly the standard library's HMAC for any key and message."""

from __future__ import annotations

import hmac

from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.signer.mac import HmacSha256


@given(st.one_of(st.binary(max_size=200), st.binary(min_size=63, max_size=66)), st.lists(st.binary(max_size=300),
                                                                                      min_size=1, max_size=3))
def test_prepared_hmac_is_hmac_sha256(key, messages):
    prepared = HmacSha256(key)
    for message in messages:  # the prepared key is reused: one message must not leak into the next
        assert prepared.digest(message) == hmac.digest(key, message, "sha256")
