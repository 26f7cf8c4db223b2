//! The linters: `cfn-lint` and `sam validate --lint`, offline.

use super::*;

#[test]
fn cfn_lint_passes() {
    let mut cmd = offline(Command::new(venv_tool("cfn-lint")));
    cmd.args(["--format", "parseable", "template.yaml"]);
    let o = run(cmd);
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "cfn-lint reported findings\n{}",
        describe(&o)
    );
}

#[test]
fn sam_validate_lint_passes_offline() {
    let mut cmd = offline(Command::new(venv_tool("sam")));
    cmd.args(["validate", "--lint", "--template", "template.yaml"]);
    let o = run(cmd);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("is a valid SAM Template"),
        "sam validate --lint failed\n{}",
        describe(&o)
    );
}
