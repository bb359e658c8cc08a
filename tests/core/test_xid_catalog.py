"""gpudoctor's Xid table held to NVIDIA's Xid catalog, row by row.

tests/data/nvidia_xid_catalog/rows.json holds the catalog's rows as published (its address is in
the file, with what could not be retrieved): the Xid, its mnemonic and description, and its
resolution buckets. For every row, gpudoctor gives a meaning, a severity and an action, and they
agree with the row's immediate resolution bucket: what the catalog says to do first is what
gpudoctor's action says, and an Xid whose first action is a GPU reset or a reboot is critical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.core import xid

DATA = Path(__file__).parents[1] / "data" / "nvidia_xid_catalog" / "rows.json"
CATALOG = json.loads(DATA.read_text(encoding="utf-8"))
ROWS = CATALOG["rows"]

# The immediate resolution bucket -> the severities that agree with it, and a word the action must hold.
AGREES = {
    "RESTART_APP": ({"warn"}, "restart"),
    "RESET_GPU": ({"critical"}, "reset"),
    "RESTART_BM": ({"critical"}, "reboot"),
    "IGNORE": ({"info", "warn"}, ""),
    "CONTACT_SUPPORT": ({"warn", "critical"}, "support"),
    "WORKFLOW_XID_45": ({"info"}, ""),
    "WORKFLOW_XID_48": ({"critical"}, "reset"),
    "WORKFLOW_NVLINK_ERR": ({"critical"}, "reset"),
    "WORKFLOW_NVLINK5_ERR": ({"warn", "critical"}, "reset"),  # by subcode: the message says Fatal or Nonfatal
    "UPDATE_SWFW": ({"warn"}, "update"),
    "CHECK_MECHANICALS": ({"critical"}, "power"),
    "RESTART_VM": ({"warn"}, "virtual machine"),
    "CHECK_UVM": ({"warn"}, "uvm"),
    "XID_154": ({"critical"}, "reset"),
    "": ({"info", "warn", "critical"}, ""),  # the catalog gives no bucket (162-172)
}


def test_the_data_cites_the_catalog_and_says_what_was_not_retrieved():
    assert CATALOG["source"] == xid.CATALOG_URL
    assert CATALOG["not_retrieved"] and CATALOG["retrieved"]
    assert [row["xid"] for row in ROWS] == list(range(1, 173))  # every row, none twice
    assert {row["immediate"] for row in ROWS} <= set(AGREES)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: f"xid{row['xid']}")
def test_every_catalog_row_has_a_meaning_severity_and_action_that_agree(row):
    info = xid.explain(row["xid"])
    assert info.code == row["xid"] and info.words and info.action
    assert "unknown" not in info.words.lower()
    assert info.bucket == row["immediate"], f"Xid {row['xid']}: {info.bucket} is not the catalog's {row['immediate']}"
    severities, word = AGREES[row["immediate"]]
    assert info.severity in severities, f"Xid {row['xid']} ({row['immediate']}): {info.severity}"
    assert word in info.action.lower(), f"Xid {row['xid']} ({row['immediate']}): {info.action}"
    if row["description"] == "Unused" and row["immediate"] == "CONTACT_SUPPORT" and row["xid"] not in xid.XID_TABLE:
        assert "unused" in info.words


def test_the_rows_once_missing_are_the_catalogs_now():
    """109, 149 and 154 were not retrieved before: now they are, and gpudoctor follows them."""
    by_xid = {row["xid"]: row for row in ROWS}
    assert by_xid[109]["mnemonic"] == "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR" and by_xid[109]["immediate"] == "RESET_GPU"
    assert xid.explain(109).severity == "critical" and 109 not in xid.APPLICATION_XIDS
    assert by_xid[149]["mnemonic"] == "NVLINK_NETIR_ERROR" and xid.explain(149).bucket == "WORKFLOW_NVLINK5_ERR"
    assert by_xid[154]["mnemonic"] == "GPU_RECOVERY_ACTION_CHANGED" and xid.explain(154).severity == "critical"


@pytest.mark.parametrize("code", [0, 173, 200, 9999])
def test_an_xid_not_in_the_catalog_says_unknown_and_links_it(code):
    info = xid.explain(code)
    assert info.words.startswith("unknown") and xid.CATALOG_URL in info.action and info.bucket == ""
