"""A study's kept ``?`` values read back as the same Python values (modelsql.catalog.study_parameters)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

from modelsql.catalog.study_parameters import kept_parameters, restored_parameters


def test_values_json_has_no_type_for_come_back_as_they_were():
    values = [None, True, 3, 2.5, "x", b"\x00ab", dt.date(2026, 12, 5), dt.datetime(2026, 12, 5, 21, 3, 4, 5),
              dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc), dt.time(1, 2, 3), dt.timedelta(days=4, microseconds=7),
              decimal.Decimal("1.10"), uuid.UUID(int=5), [1, dt.date(2020, 1, 1)], {"a": decimal.Decimal("2")}]
    back = restored_parameters(json.loads(json.dumps(kept_parameters(values))))
    assert back == values and [type(v) for v in back] == [type(v) for v in values]


def test_values_kept_as_text_by_older_studies_read_back_as_that_text():
    assert restored_parameters(["4 days, 0:00:00", {"a": 1}, {"$unknown": 1}]) == [
        "4 days, 0:00:00", {"a": 1}, {"$unknown": 1}]
