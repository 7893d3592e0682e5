"""On-demand hourly prices per instance type, each with its source, and what a run costs.

The built-in figures are public ones with their source named; config.toml's `[prices]` table overrides them
(`"ml.trn1.32xlarge" = 24.725`), and `trnconsole prices --refresh` stores the AWS Price List API's current
figures in a cache that wins over the built-ins. Nothing here imports boto3.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError

SEED_BERT = (
    "AWS ML blog: Maximize performance and reduce your deep learning training cost with AWS Trainium "
    "and Amazon SageMaker (BERT benchmark table)"
)
USAGE_AI = "usage.ai, AWS Trainium vs GPU Instances (updated 2026-06-25)"
UNVERIFIED = "commonly quoted us-east-1 on-demand price, not checked against AWS: refresh or override it"


@dataclass(frozen=True)
class Price:
    instance_type: str
    usd_per_hour: float
    source: str
    fetched_at: float | None = None  # when the Price List API answered; None for built-in and config figures

    @property
    def verified(self) -> bool:
        return self.source != UNVERIFIED


BUILTIN: dict[str, Price] = {
    p.instance_type: p
    for p in (
        Price("ml.trn1.32xlarge", 24.725, SEED_BERT),
        Price("ml.p4d.24xlarge", 37.69, SEED_BERT),
        Price("trn1.32xlarge", 21.50, USAGE_AI),
        Price("p4d.24xlarge", 32.77, USAGE_AI),
        Price("trn1.2xlarge", 1.34375, UNVERIFIED),
        Price("trn1n.32xlarge", 24.78, UNVERIFIED),
    )
}


EC2_TYPE = re.compile(
    r"^(ml\.)?[a-z][a-z0-9-]*\.[0-9]*(nano|micro|small|medium|large|xlarge|metal)[a-z0-9-]*$"
)


def instance_type_from_dmi(product_name: str) -> str | None:
    """EC2 Nitro instances name their type in DMI's product_name (e.g. "trn1.32xlarge"); other machines
    say something else."""
    text = product_name.strip()
    return text if EC2_TYPE.match(text) else None


class PriceBook:
    """Prices by instance type: config.toml over the refreshed cache over the built-in table."""

    def __init__(self, config: Mapping[str, Any] | None = None, cache: Path | None = None) -> None:
        self.prices: dict[str, Price] = dict(BUILTIN)
        if cache is not None:
            self.prices.update(read_cache(cache))
        table = (config or {}).get("prices") or {}
        if not isinstance(table, Mapping):
            raise UsageError("config.toml [prices]: expected a table of instance type = dollars per hour")
        for instance_type, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise UsageError(
                    f'config.toml [prices] "{instance_type}" = {value!r}: expected dollars per hour, '
                    f'e.g. "{instance_type}" = 21.5'
                )
            self.prices[instance_type] = Price(instance_type, float(value), "config.toml")

    def get(self, instance_type: str | None) -> Price | None:
        return self.prices.get(instance_type) if instance_type else None

    def rows(self) -> list[Price]:
        return [self.prices[k] for k in sorted(self.prices)]


def read_cache(path: Path) -> dict[str, Price]:
    """Prices stored by a refresh; a missing or damaged cache is simply not used."""
    try:
        data = json.loads(path.read_text())
        return {
            row["instance_type"]: Price(
                row["instance_type"], float(row["usd_per_hour"]), row["source"], row.get("fetched_at")
            )
            for row in data["prices"]
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def write_cache(path: Path, prices: list[Price]) -> None:
    merged = read_cache(path)
    merged.update({p.instance_type: p for p in prices})
    rows = [
        {
            "instance_type": p.instance_type,
            "usd_per_hour": p.usd_per_hour,
            "source": p.source,
            "fetched_at": p.fetched_at,
        }
        for p in sorted(merged.values(), key=lambda p: p.instance_type)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"written_at": time.time(), "prices": rows}, indent=1))
    tmp.replace(path)


def on_demand_usd(price_list_item: Mapping[str, Any]) -> float | None:
    """The hourly USD figure of one Price List API product (its OnDemand term's price dimension)."""
    terms = (price_list_item.get("terms") or {}).get("OnDemand") or {}
    for term in terms.values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") not in ("Hrs", "Hours", "Hour"):
                continue
            usd = (dimension.get("pricePerUnit") or {}).get("USD")
            try:
                value = float(usd)
            except (TypeError, ValueError):
                continue
            if value > 0:
                return value
    return None


# ---- what a run costs ----


@dataclass(frozen=True)
class Cost:
    """A run's cost figures in dollars; None where the inputs are not known."""

    instance_type: str | None
    instances: int
    usd_per_hour: float | None
    price_source: str | None
    billed_seconds: float | None  # SageMaker's billable seconds, else the run's elapsed time
    so_far: float | None
    projected: float | None  # at the end of the run, from its step rate so far
    per_1k_samples: float | None
    spot_savings: float | None  # fraction of the training time not billed (SageMaker managed spot)


def run_cost(
    price: Price | None,
    instances: int,
    elapsed_s: float | None,
    billable_s: float | None = None,
    training_s: float | None = None,
    step: int | None = None,
    total_steps: int | None = None,
    samples_per_s: float | None = None,
    instance_type: str | None = None,
) -> Cost:
    """Cost so far (billable seconds when the service reports them, else elapsed x instances x price), the
    projected cost at the last step, and the cost of 1,000 samples at the measured rate."""
    instances = max(1, instances)
    rate = price.usd_per_hour * instances if price is not None else None
    billed = billable_s if billable_s is not None else elapsed_s
    so_far = rate * billed / 3600.0 if rate is not None and billed is not None else None
    projected = None
    if so_far is not None and step and total_steps and step < total_steps and elapsed_s:
        projected = so_far * total_steps / step
    elif so_far is not None and step and total_steps and step >= total_steps:
        projected = so_far
    per_1k = rate / 3600.0 / samples_per_s * 1000.0 if rate is not None and samples_per_s else None
    savings = None
    if billable_s is not None and training_s:
        savings = max(0.0, 1.0 - billable_s / training_s)
    return Cost(
        instance_type=instance_type or (price.instance_type if price else None),
        instances=instances,
        usd_per_hour=price.usd_per_hour if price else None,
        price_source=price.source if price else None,
        billed_seconds=billed,
        so_far=so_far,
        projected=projected,
        per_1k_samples=per_1k,
        spot_savings=savings,
    )
