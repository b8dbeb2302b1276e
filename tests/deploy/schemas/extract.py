"""Make the vendored JSON schemas in this folder from their upstream files (see README.md).

Run: ``python tests/deploy/schemas/extract.py SWAGGER_JSON TRAINJOB_CRD PYTORCHJOB_CRD`` (offline,
once per upstream update; the suite only reads the results). What it does, and nothing else:
Kubernetes kinds are cut out of the swagger file with every definition they reach (``$ref`` as
in upstream); a CRD's kind is its ``openAPIV3Schema``; ``description`` texts are dropped (they
are most of the size and validate nothing). Strictness (unknown fields are errors) is added by
the test when it loads a schema, so these files stay upstream's rules.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CORE = {
    "service-v1.json": "io.k8s.api.core.v1.Service",
    "persistentvolumeclaim-v1.json": "io.k8s.api.core.v1.PersistentVolumeClaim",
    "job-batch-v1.json": "io.k8s.api.batch.v1.Job",
}


def strip(node: Any) -> Any:
    """``node`` without its ``description`` texts (at every depth)."""
    if isinstance(node, dict):
        return {key: strip(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [strip(value) for value in node]
    return node


def refs(node: Any) -> set[str]:
    """The definition names ``node`` refers to (``#/definitions/NAME``)."""
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[1]} if "$ref" in node else set()
        return found.union(*(refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(refs(value) for value in node))
    return set()


def core_schema(definitions: dict, root: str) -> dict:
    """``root`` and every definition it reaches, as one self-contained schema."""
    wanted, todo = {}, [root]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted[name] = strip(definitions[name])
            todo.extend(refs(wanted[name]))
    return {"$ref": f"#/definitions/{root}", "definitions": dict(sorted(wanted.items()))}


def crd_schema(path: str) -> dict:
    """The served version's ``openAPIV3Schema`` of the CRD in ``path``."""
    crd = yaml.safe_load(Path(path).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served", True)]
    return strip(version["schema"]["openAPIV3Schema"])


def main(swagger: str, trainjob_crd: str, pytorchjob_crd: str) -> None:
    definitions = json.loads(Path(swagger).read_text())["definitions"]
    made = {name: core_schema(definitions, root) for name, root in CORE.items()}
    made["trainjob-trainer.kubeflow.org-v1alpha1.json"] = crd_schema(trainjob_crd)
    made["pytorchjob-kubeflow.org-v1.json"] = crd_schema(pytorchjob_crd)
    for name, schema in made.items():
        (HERE / name).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {(HERE / name).stat().st_size} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
