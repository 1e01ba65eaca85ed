"""Which campaigns ``python -m soak`` runs: all, the failover ones, or those named."""

from __future__ import annotations

import pytest

from soak.__main__ import CAMPAIGNS, campaigns, main


def test_every_campaign_by_default_and_the_failover_ones_on_their_own() -> None:
    assert campaigns(None, failover_only=False, skip_decoder_fuzz=False) == set(CAMPAIGNS)
    assert campaigns(None, failover_only=True, skip_decoder_fuzz=False) == {
        "failover",
        "network-cuts",
    }
    assert "decoder-fuzz" not in campaigns(None, failover_only=False, skip_decoder_fuzz=True)


def test_only_names_the_campaigns_whatever_else_is_said() -> None:
    only = ["maintenance-move", "network-cuts"]
    assert campaigns(only, failover_only=True, skip_decoder_fuzz=False) == set(only)
    assert campaigns(["decoder-fuzz"], failover_only=False, skip_decoder_fuzz=True) == set()


def test_an_unknown_campaign_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--only", "chaos"])
    assert exited.value.code == 2
    assert "invalid choice: 'chaos'" in capsys.readouterr().err
