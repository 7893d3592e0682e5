"""Prices with their sources, what a run costs, the compare table's price-performance columns (the BERT
benchmark table of the Trainium + SageMaker cost study, reproduced), and a refresh from the Price List API."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import pytest
from aws_helpers import point_aws_at

from trnconsole.cli import main
from trnconsole.core.compare import compare_rows
from trnconsole.core.errors import UsageError
from trnconsole.core.pricing import (
    BUILTIN,
    Price,
    PriceBook,
    instance_type_from_dmi,
    on_demand_usd,
    read_cache,
    run_cost,
    write_cache,
)
from trnconsole.core.spec import RunSpec
from trnconsole.service import Console


def test_builtin_prices_name_their_source_and_unverified_ones_say_so() -> None:
    assert BUILTIN["ml.trn1.32xlarge"].usd_per_hour == 24.725
    assert BUILTIN["ml.p4d.24xlarge"].usd_per_hour == 37.69
    assert BUILTIN["trn1.32xlarge"].usd_per_hour == 21.50
    assert BUILTIN["p4d.24xlarge"].usd_per_hour == 32.77
    assert "BERT benchmark" in BUILTIN["ml.trn1.32xlarge"].source
    assert all(p.source for p in BUILTIN.values())
    assert not BUILTIN["trn1.2xlarge"].verified and BUILTIN["trn1.32xlarge"].verified


def test_config_overrides_the_cache_which_overrides_the_builtins(tmp_path) -> None:
    cache = tmp_path / "prices.json"
    write_cache(cache, [Price("trn1.32xlarge", 20.0, "AWS Price List API, us-east-1, 2026-11-22", 1.0)])
    book = PriceBook({"prices": {"ml.trn1.32xlarge": 23}}, cache=cache)
    assert book.get("trn1.32xlarge").usd_per_hour == 20.0
    assert book.get("ml.trn1.32xlarge") == Price("ml.trn1.32xlarge", 23.0, "config.toml")
    assert book.get("p4d.24xlarge").usd_per_hour == 32.77
    assert book.get("x9.huge") is None and book.get(None) is None


def test_a_bad_config_price_is_one_line_naming_the_entry(tmp_path) -> None:
    with pytest.raises(
        UsageError, match=r'^config.toml \[prices\] "trn1.32xlarge" = \'cheap\': expected dollars'
    ):
        PriceBook({"prices": {"trn1.32xlarge": "cheap"}})


def test_a_damaged_cache_is_ignored(tmp_path) -> None:
    cache = tmp_path / "prices.json"
    cache.write_text('{"prices": [{"instance_type": "trn1.32xlarge"')
    assert read_cache(cache) == {}
    assert PriceBook(cache=cache).get("trn1.32xlarge").usd_per_hour == 21.50


def test_ec2_names_its_instance_type_in_dmi_and_other_machines_do_not() -> None:
    assert instance_type_from_dmi("trn1.32xlarge\n") == "trn1.32xlarge"
    assert instance_type_from_dmi("p4d.24xlarge") == "p4d.24xlarge"
    assert instance_type_from_dmi("Standard PC (Q35 + ICH9, 2009)") is None
    assert instance_type_from_dmi("") is None


def test_cost_so_far_projection_per_1k_samples_and_spot_savings() -> None:
    price = BUILTIN["trn1.32xlarge"]
    cost = run_cost(price, 2, elapsed_s=1800, step=250, total_steps=1000, samples_per_s=400.0)
    assert cost.so_far == pytest.approx(21.50)  # half an hour on two instances
    assert cost.projected == pytest.approx(86.0)  # a quarter of the steps done
    assert cost.per_1k_samples == pytest.approx(43.0 / 3600 / 400 * 1000)
    spot = run_cost(BUILTIN["ml.trn1.32xlarge"], 1, elapsed_s=4000, billable_s=1200, training_s=4000)
    assert spot.billed_seconds == 1200 and spot.spot_savings == pytest.approx(0.7)
    assert spot.so_far == pytest.approx(24.725 / 3)
    unknown = run_cost(None, 1, elapsed_s=60)
    assert unknown.so_far is None and unknown.per_1k_samples is None


@pytest.fixture
def benchmark_home(tmp_path, monkeypatch) -> tuple[Console, list[str]]:
    """The cost study's two SageMaker jobs as finished runs: same model and data, two instance types."""
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    console = Console(tmp_path / "home")
    ids = []
    for instance, billable, throughput in (("ml.trn1.32xlarge", 6033, 6.64), ("ml.p4d.24xlarge", 6553, 5.44)):
        spec = RunSpec(runner="bert", backend="sagemaker", backend_options={"instance_type": instance})
        record = console.store.create(spec, console.run_dir)
        record.run_dir.mkdir(parents=True)
        console.store.update(
            record.id,
            status="completed",
            started_at=1000.0,
            ended_at=1000.0 + billable + 300,
            detail={"billable_seconds": billable, "training_seconds": billable},
        )
        (record.run_dir / "result.json").write_text(
            json.dumps({"avg_samples_per_s": throughput, "eval_accuracy": 0.984, "step": 100})
        )
        ids.append(record.id)
    return console, ids


def test_compare_reproduces_the_cost_studys_price_performance_table(benchmark_home) -> None:
    console, ids = benchmark_home
    runs = [(i, None, console.summary(console.store.get(i))) for i in ids]
    trn1, p4d = compare_rows(runs)
    assert trn1["usd_per_hour"] == 24.725 and p4d["usd_per_hour"] == 37.69
    assert trn1["billed_seconds"] == 6033 and p4d["billed_seconds"] == 6553
    # The article prints $41.47 and $68.6: billable hours x price per hour.
    assert trn1["cost_usd"] == pytest.approx(41.43, abs=0.01)
    assert p4d["cost_usd"] == pytest.approx(68.61, abs=0.01)
    assert trn1["eval_value"] == p4d["eval_value"] == 0.984
    # Against the Trainium baseline: the GPU job cost 1.66x as much for 0.82x the throughput.
    assert p4d["cost_usd_ratio"] == pytest.approx(1.656, abs=0.001)
    assert p4d["avg_samples_per_s_ratio"] == pytest.approx(5.44 / 6.64)


def test_compare_cli_prints_the_price_columns(benchmark_home, capsys) -> None:
    _, ids = benchmark_home
    assert main(["compare", *ids]) == 0
    out = capsys.readouterr().out
    assert "ml.trn1.32xlarge" in out and "41.43" in out and "68.61" in out and "1.66x" in out
    assert main(["compare", *ids, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["cost_usd"], 2) for r in rows] == [41.43, 68.61]


# ---- the Price List API ----

EC2_PRODUCT = {
    "product": {"attributes": {"instanceType": "trn1.32xlarge", "regionCode": "us-east-1"}},
    "terms": {
        "OnDemand": {
            "ABC.JRTCKXETXF": {
                "priceDimensions": {
                    "ABC.JRTCKXETXF.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": "21.5000000000"},
                        "description": "$21.50 per On Demand Linux trn1.32xlarge Instance Hour",
                    }
                }
            }
        }
    },
}
SAGEMAKER_PRODUCTS = [
    {
        "product": {"attributes": {"instanceName": "ml.trn1.32xlarge", "component": "Hosting"}},
        "terms": {
            "OnDemand": {"T": {"priceDimensions": {"D": {"unit": "Hrs", "pricePerUnit": {"USD": "30.1"}}}}}
        },
    },
    {
        "product": {"attributes": {"instanceName": "ml.trn1.32xlarge", "component": "Training"}},
        "terms": {
            "OnDemand": {"T": {"priceDimensions": {"D": {"unit": "Hrs", "pricePerUnit": {"USD": "24.725"}}}}}
        },
    },
]


def test_on_demand_price_is_read_from_a_price_list_product() -> None:
    assert on_demand_usd(EC2_PRODUCT) == 21.5
    assert on_demand_usd({"terms": {"OnDemand": {}}}) is None


@pytest.fixture
def price_list_api(monkeypatch, tmp_path) -> Iterator[list[dict]]:
    """A stand-in for the Price List API's GetProducts on 127.0.0.1, answering the real JSON protocol."""
    from aiohttp import web

    requests: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        requests.append({"target": request.headers.get("X-Amz-Target"), **body})
        fields = {f["Field"]: f["Value"] for f in body.get("Filters", [])}
        if body["ServiceCode"] == "AmazonEC2" and fields.get("instanceType") == "trn1.32xlarge":
            items = [EC2_PRODUCT]
        elif body["ServiceCode"] == "AmazonSageMaker" and fields.get("instanceName") == "ml.trn1.32xlarge":
            items = SAGEMAKER_PRODUCTS
        else:
            items = []
        payload = {"FormatVersion": "aws_v1", "PriceList": [json.dumps(i) for i in items]}
        return web.json_response(payload, content_type="application/x-amz-json-1.1")

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    point_aws_at(monkeypatch, tmp_path, "AWS_ENDPOINT_URL_PRICING", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    yield requests
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_refresh_stores_the_price_list_figures_with_their_source(price_list_api, capsys, tmp_path) -> None:
    assert main(["prices", "--refresh", "--json"]) == 0
    rows = {r["instance_type"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["trn1.32xlarge"]["source"].startswith("AWS Price List API, us-east-1, ")
    assert rows["ml.trn1.32xlarge"]["usd_per_hour"] == 24.725  # the training product, not hosting
    assert rows["p4d.24xlarge"]["source"].startswith("usage.ai")  # no answer: the built-in figure stays
    ec2 = next(r for r in price_list_api if r["ServiceCode"] == "AmazonEC2")
    assert ec2["target"] == "AWSPriceListService.GetProducts"
    assert {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"} in ec2["Filters"]
    cached = read_cache(tmp_path / "home" / "cache" / "prices.json")
    assert cached["trn1.32xlarge"].fetched_at and time.time() - cached["trn1.32xlarge"].fetched_at < 60
    assert main(["prices", "--type", "trn1.32xlarge"]) == 0
    assert "AWS Price List API" in capsys.readouterr().out


def test_the_dashboard_states_the_cost_with_its_basis() -> None:
    from trnconsole.ui.format import cost_line

    cost = run_cost(
        BUILTIN["trn1.32xlarge"], 2, elapsed_s=1800, step=250, total_steps=1000, samples_per_s=400.0
    )
    assert cost_line(cost) == (
        "$21.50 so far (2 x trn1.32xlarge at $21.5/h), ~$86.00 at the end, $0.0299/1k samples"
    )
