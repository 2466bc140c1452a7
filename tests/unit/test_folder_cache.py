"""A folder of results files read as one (dlperf.results.merge.open_results) is cached as
its merged copy (dlperf.results.foldercache); and the imports of reading one."""

from __future__ import annotations


def test_the_restated_wait_criterion_is_the_pipelines():
    from dlperf.data.pipeline import WAIT_CRITERION
    from dlperf.results import migrations

    assert migrations.WAIT_CRITERION == WAIT_CRITERION
    dw = {"time_share": 0.4, "share": 0.1, "threshold": 0.3}
    assert migrations.restate_data_wait(dw)
    assert dw["criterion"] == WAIT_CRITERION and dw["share"] == 0.4 and dw["input_bound"]
