"""Every Kubernetes manifest under ``deploy/`` validates against the schema of its kind, offline.

Run: ``.venv/bin/python -m pytest tests/deploy/test_manifests.py -q`` (about 2 s, no cluster:
``jsonschema`` against the schemas vendored in tests/deploy/schemas/, whose README says where
each came from). Each document's ``apiVersion`` and ``kind`` pick its schema; a kind without one
fails (add its schema), and a failure names the file, the document and the field path. Unknown
fields are errors (kubeconform's strict mode), so a misspelt field does not pass unnoticed.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema", reason="the dev extra's jsonschema validates the manifests")

from tests.helpers.paths import REPO  # noqa: E402

DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
SCHEMA_OF = {
    ("v1", "Service"): "service-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainjob-trainer.kubeflow.org-v1alpha1.json",
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjob-kubeflow.org-v1.json",
}
WIDENED = {
    # OpenAPI v2 says "string" for these; the API server also takes a number (as kubeconform does).
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"anyOf": [{"type": "string"}, {"type": "number"}]},
}


def strict(node: Any) -> Any:
    """``node`` where every object with listed properties takes no others (unless the schema
    keeps unknown fields on purpose: ``x-kubernetes-preserve-unknown-fields``)."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict(value) for key, value in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@cache
def validator(file: str) -> Any:
    schema = json.loads((SCHEMAS / file).read_text())
    for name, widened in WIDENED.items():
        if name in schema.get("definitions", {}):
            schema["definitions"][name] = widened
    return jsonschema.Draft4Validator(strict(schema))


def problems(document: Any, where: str) -> list[str]:
    """One line per schema violation of ``document``: ``where: field.path: message``."""
    if not isinstance(document, dict):
        return [f"{where}: not a mapping"]
    key = (document.get("apiVersion"), document.get("kind"))
    if key not in SCHEMA_OF:
        return [f"{where}: no vendored schema for apiVersion {key[0]!r} kind {key[1]!r} (tests/deploy/schemas/)"]
    found = validator(SCHEMA_OF[key]).iter_errors(document)
    return sorted(f"{where}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in found)


def documents(path: Path) -> list[tuple[str, Any]]:
    """(``file, document N (kind name)``, document) for each non-empty YAML document of ``path``."""
    out = []
    for number, doc in enumerate(yaml.safe_load_all(path.read_text()), start=1):
        if doc is None:
            continue
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        kind = doc.get("kind") if isinstance(doc, dict) else None
        out.append((f"{path.relative_to(REPO)}, document {number} ({kind} {name})", doc))
    return out


MANIFESTS = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_the_manifests_are_found():
    names = {p.name for p in MANIFESTS}
    assert {"indexed-job.yaml", "pytorchjob.yaml", "trainjob.yaml"} <= names, names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_document_validates(path):
    docs = documents(path)
    assert docs, f"{path}: no YAML document"
    found = [line for where, doc in docs for line in problems(doc, where)]
    assert not found, "\n".join(found)


def trainjob() -> dict:
    docs = [doc for _, doc in documents(DEPLOY / "kubernetes" / "trainjob.yaml")]
    return copy.deepcopy(next(d for d in docs if d["kind"] == "TrainJob"))


def indexed_job() -> dict:
    docs = [doc for _, doc in documents(DEPLOY / "kubernetes" / "indexed-job.yaml")]
    return copy.deepcopy(next(d for d in docs if d["kind"] == "Job"))


def test_a_misspelt_field_is_named_with_its_path():
    job = trainjob()
    job["spec"]["trainer"]["numNode"] = job["spec"]["trainer"].pop("numNodes")
    assert problems(job, "trainjob") == [
        "trainjob: spec.trainer: Additional properties are not allowed ('numNode' was unexpected)"
    ]


def test_a_wrong_type_deep_in_a_pod_spec_is_named_with_its_path():
    job = indexed_job()
    job["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "29500"
    job["spec"]["completions"] = "4"
    assert problems(job, "job") == [
        "job: spec.completions: '4' is not of type 'integer'",
        "job: spec.template.spec.containers.0.ports.0.containerPort: '29500' is not of type 'integer'",
    ]


def test_missing_required_fields_fail():
    job = trainjob()
    del job["spec"]["runtimeRef"]["name"]
    job["spec"]["trainer"]["env"][1]["valueFrom"] = {"fieldRef": {}}
    found = problems(job, "trainjob")
    assert "trainjob: spec.runtimeRef: 'name' is a required property" in found
    assert "trainjob: spec.trainer.env.1.valueFrom.fieldRef: 'fieldPath' is a required property" in found


def test_quantities_and_ports_take_numbers_or_strings_as_the_api_server_does():
    job = indexed_job()
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": 4, "memory": "8Gi"}
    assert problems(job, "job") == []


def test_a_kind_without_a_schema_is_not_passed_silently():
    found = problems({"apiVersion": "apps/v1", "kind": "Deployment"}, "x.yaml, document 1")
    assert found == [
        "x.yaml, document 1: no vendored schema for apiVersion 'apps/v1' kind 'Deployment' (tests/deploy/schemas/)"
    ]
