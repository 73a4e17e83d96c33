"""`kafkafast features --describe`: kafka-features.sh — the feature flags a broker supports
and the finalized levels (ApiVersions v3), in Kafka's text."""
from __future__ import annotations

import argparse
from typing import Any

from kafkafast.cli.common import admin_tool_parser, run_admin

NAME = "features"


def add_parser(sub: Any) -> None:
    admin_tool_parser(sub, NAME, "describe the cluster's feature flags (kafka-features.sh)", [
        "kafkafast features --bootstrap-server 127.0.0.1:9092 --describe",
    ], describe="the supported and finalized features")


def run(args: argparse.Namespace) -> int:
    resp = run_admin(args, lambda admin: admin.features())
    finalized = {f.name: f.max_version_level for f in resp.finalized_features or []}
    epoch = resp.finalized_features_epoch if resp.finalized_features_epoch >= 0 else "-"
    for f in sorted(resp.supported_features or [], key=lambda f: f.name):
        print(f"Feature: {f.name}\tSupportedMinVersion: {f.min_version}\tSupportedMaxVersion: {f.max_version}\t"
              f"FinalizedVersionLevel: {finalized.get(f.name, 0)}\tEpoch: {epoch}")
    return 0
