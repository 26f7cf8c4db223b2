"""template.yaml as AWS SAM transforms it, printed as JSON (offline).

Used by test/equivalence.test.ts: the SAM translator the SAM CLI uses (aws-sam-translator, from
the repository's .venv-infra) turns the template into plain CloudFormation, with its Conditions,
Rules and Parameters kept, so that the same resolver (test/resolve.ts) decides both it and the
construct's synthesized template for one set of inputs. Local CodeUri is replaced by a placeholder
as `sam validate` does; no managed policy is looked up (the template attaches none).
"""
import copy
import json
import os
import sys

from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    def load(self):
        return {}


def main(path):
    # The translator wants a region (for ARNs it would build; this template makes none): offline.
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    os.environ.pop("AWS_PROFILE", None)
    raw = json.loads(json.dumps(cfn_yaml.load(path)))
    sam = copy.deepcopy(raw)
    for res in sam.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = "s3://placeholder/code.zip"
    out = transform(sam, {}, NoManagedPolicies())
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
