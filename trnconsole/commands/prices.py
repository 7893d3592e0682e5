"""`trnconsole prices`: the hourly price of each instance type with its source; `--refresh` asks the AWS
Price List API for the current on-demand figures (EC2 and SageMaker training) and keeps them in a cache."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ..core.pricing import Price, on_demand_usd, write_cache
from ..textfmt import json_text, table

PRICING_REGION = "us-east-1"  # the Price List API answers from here, for every region


def cmd_prices(args: argparse.Namespace, console_factory: Any) -> int:
    console = console_factory()
    if args.refresh:
        types = sorted({*console.prices.prices, *args.type})
        fetched = refresh(types, args.region)
        write_cache(console.price_cache, fetched)
        missing = sorted(set(types) - {p.instance_type for p in fetched})
        console = console_factory()  # a fresh price book, now with the cache
        if missing and not args.json:
            print(f"the Price List API has no on-demand price for: {', '.join(missing)}")
    rows = console.prices.rows()
    if args.type:
        rows = [p for p in rows if p.instance_type in args.type]
    if args.json:
        print(json_text([{**vars(p), "verified": p.verified} for p in rows]))
        return 0
    body = [(p.instance_type, f"{p.usd_per_hour:g}", ("" if p.verified else "~ ") + p.source) for p in rows]
    print(table(("INSTANCE", "USD/H", "SOURCE"), body))
    return 0


def refresh(instance_types: list[str], region: str) -> list[Price]:
    """Current on-demand prices for these types in `region` (Linux, shared tenancy; SageMaker training)."""
    from ..backends.aws import aws_client, call

    client = aws_client("pricing", region=PRICING_REGION)
    now = time.time()
    prices = []
    for instance_type in instance_types:
        usd = _lookup(client, call, instance_type, region)
        if usd is not None:
            source = f"AWS Price List API, {region}, {time.strftime('%Y-%m-%d', time.gmtime(now))}"
            prices.append(Price(instance_type, usd, source, fetched_at=now))
    return prices


def _lookup(client: Any, call: Any, instance_type: str, region: str) -> float | None:
    def match(field: str, value: str) -> dict[str, str]:
        return {"Type": "TERM_MATCH", "Field": field, "Value": value}

    if instance_type.startswith("ml."):
        service = "AmazonSageMaker"
        filters = [match("instanceName", instance_type), match("regionCode", region)]
    else:
        service = "AmazonEC2"
        filters = [
            match("instanceType", instance_type),
            match("regionCode", region),
            match("operatingSystem", "Linux"),
            match("tenancy", "Shared"),
            match("preInstalledSw", "NA"),
            match("capacitystatus", "Used"),
        ]
    token = None
    while True:
        kwargs: dict[str, Any] = {"ServiceCode": service, "Filters": filters, "MaxResults": 100}
        if token:
            kwargs["NextToken"] = token
        page = call(client.get_products, action="pricing:GetProducts", **kwargs)
        for text in page.get("PriceList", []):
            try:
                item = json.loads(text) if isinstance(text, str) else text
            except ValueError:
                continue
            if service == "AmazonSageMaker" and not _is_training(item):
                continue
            usd = on_demand_usd(item)
            if usd is not None:
                return usd
        token = page.get("NextToken")
        if not token:
            return None


def _is_training(item: dict[str, Any]) -> bool:
    """SageMaker lists one product per use of an instance type (training, hosting, notebooks...)."""
    attributes = (item.get("product") or {}).get("attributes") or {}
    component = str(attributes.get("component", "")).lower()
    usage = str(attributes.get("usagetype", "")).lower()
    return component == "training" or "train" in usage
