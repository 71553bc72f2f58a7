"""ctxeng.sdk._shell: the files a shell command reads and writes.

Expected values are written by hand from the rules; the commands are those real agents send
(mini-swe-agent and SWE-agent runs in the shared traces beside the repository).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from bench.infra import TRACES
from ctxeng.sdk._shell import Effect, effects


def read(path: str, lines: str | None = None, part: str | None = None) -> Effect:
    return Effect("read", path, lines, part)


def write(path: str) -> Effect:
    return Effect("write", path)


# --- reads ----------------------------------------------------------------------------------


def test_a_cat_reads_each_file_whole():
    assert effects("cat a.py b/c.py") == [read("a.py"), read("b/c.py")]
    assert effects("cat -n src/x.py") == [read("src/x.py")]


def test_nl_reads_the_whole_file():
    assert effects("nl -ba src/x.py") == [read("src/x.py")]


def test_head_reads_the_first_lines():
    assert effects("head src/x.py") == [read("src/x.py", "1-10")]
    assert effects("head -n 20 src/x.py") == [read("src/x.py", "1-20")]
    assert effects("head -20 src/x.py") == [read("src/x.py", "1-20")]


def test_tail_reads_the_last_lines_as_a_part_or_from_a_line_on():
    assert effects("tail -n 30 log.txt") == [read("log.txt", part="last 30 lines")]
    assert effects("tail -n +40 src/x.py") == [read("src/x.py", "40-")]


def test_a_sed_range_reads_those_lines():
    assert effects("sed -n '120,160p' django/db/migrations/serializer.py") == [
        read("django/db/migrations/serializer.py", "120-160")]
    assert effects("sed -n '5p' x.py") == [read("x.py", "5")]
    assert effects("sed -n '100,$p' x.py") == [read("x.py", "100-")]


def test_several_sed_ranges_read_each_in_file_order():
    assert effects("sed -n '40,50p;1,20p' x.py") == [read("x.py", "1-20,40-50")]
    assert effects("sed -n -e '1,20p' -e '40,50p' x.py") == [read("x.py", "1-20,40-50")]


def test_an_awk_line_range_reads_those_lines():
    assert effects("awk 'NR>=10 && NR<=20' x.py") == [read("x.py", "10-20")]
    assert effects("awk 'NR==3,NR==7' x.py") == [read("x.py", "3-7")]


def test_grep_on_a_named_file_reads_the_matching_lines():
    assert effects('grep -n "Backoff" src/x.py') == [read("src/x.py", part="lines matching 'Backoff'")]
    assert effects("grep -n Backoff a.py b.py") == [
        read("a.py", part="lines matching 'Backoff'"), read("b.py", part="lines matching 'Backoff'")]


def test_grep_with_context_or_inverted_says_so():
    assert effects("grep -n -A 5 retry x.py") == [read("x.py", part="lines matching 'retry' with context")]
    assert effects("grep -v retry x.py") == [read("x.py", part="lines not matching 'retry'")]


def test_numbered_lines_through_sed_read_those_lines():
    # mini-swe-agent's idiom
    assert effects("nl -ba django/db/models/base.py | sed -n '100,140p'") == [
        read("django/db/models/base.py", "100-140")]


def test_a_file_piped_into_head_or_tail_reads_a_part():
    assert effects("cat src/x.py | head -200") == [read("src/x.py", "1-200")]
    assert effects("cat src/x.py | tail -n 5") == [read("src/x.py", part="last 5 lines")]
    assert effects("head -50 x.py | tail -10") == [read("x.py", "41-50")]


def test_a_file_piped_into_grep_reads_the_matching_lines():
    assert effects('cat /t/x.py | grep -n "_arithmetic_mask" -A 30') == [
        read("/t/x.py", part="lines matching '_arithmetic_mask' with context")]


def test_a_grep_piped_into_head_reads_a_part_of_the_matches():
    assert effects("grep -n enum x.py | head -20") == [
        read("x.py", part="first 20 of lines matching 'enum'")]


def test_a_read_whose_output_goes_elsewhere_is_no_read():
    assert effects("cat x.py > /dev/null") == []
    assert effects("cat x.py | wc -l") == []
    assert effects("cat x.py | sort | head") == []
    assert effects("grep -c foo x.py") == []
    assert effects("grep -l foo x.py") == []


def test_a_positional_filter_over_several_files_claims_nothing():
    assert effects("cat a.py b.py | head -5") == []


# --- what claims nothing --------------------------------------------------------------------


def test_a_recursive_grep_claims_nothing():
    assert effects("grep -rn Backoff src/") == []
    assert effects('grep -r "Enum(" ./tests/ --include="*.py" | head -20') == []


def test_a_grep_on_a_directory_claims_nothing_for_it():
    assert effects("grep -n Backoff src/ a.py") == [read("a.py", part="lines matching 'Backoff'")]


def test_globs_claim_nothing():
    assert effects("cat src/*.py") == []
    assert effects("rm -f build/*.o x?.txt [ab].py") == []
    assert effects("cat {a,b}.py") == []


def test_variables_and_substitutions_claim_nothing():
    assert effects("cat $FILE") == []
    assert effects('sed -i "s/a/b/" "$f"') == []
    assert effects("cat $(git ls-files | head -1)") == []
    assert effects("cat `which x`") == []
    assert effects("cat ~/notes.txt") == []


def test_stdin_and_devices_claim_nothing():
    assert effects("cat - < x.py") == []
    assert effects("cat /dev/urandom | head -c 10") == []
    assert effects("cat x.py | cat <<'EOF'\nhello\nEOF") == []


def test_a_lone_dollar_is_a_literal_character_not_an_expansion():
    # `$` before a space or the end of the word expands nothing: bash passes it on as it is
    assert effects("grep -n return$ x.py") == [read("x.py", part="lines matching 'return$'")]
    assert effects("echo costs 5$ > out.txt; cat a.py") == [write("out.txt"), read("a.py")]


def test_a_file_redirected_into_a_filter_is_read():
    assert effects("head -n 5 < x.py") == [read("x.py", "1-5")]
    assert effects("cat < x.py | grep -n foo") == [read("x.py", part="lines matching 'foo'")]


def test_running_programs_claims_nothing():
    assert effects("python reproduce_issue.py") == []
    assert effects("python -m pytest tests/test_x.py -x") == []
    assert effects("pip install -e . -q && make build") == []
    assert effects("touch new.py") == []


def test_find_piped_into_grep_claims_nothing():
    assert effects('find . -name "*.py" | grep enum | head -20') == []


def test_sed_printing_the_whole_transformed_file_claims_nothing():
    # not a recognised reading form: its output is the file changed, not the file
    assert effects("sed 's/a/b/' x.py") == []


def test_an_unknown_option_claims_nothing():
    assert effects("head -c 100 x.py") == []
    assert effects("tail -f log.txt") == []


def test_git_apply_of_a_patch_file_claims_nothing():
    assert effects("git apply fix.patch") == []
    assert effects("patch -p1 < /tmp/fix.patch") == []


# --- writes ---------------------------------------------------------------------------------


def test_sed_in_place_writes_each_file():
    assert effects("sed -i 's/a/b/' x.py y.py") == [write("x.py"), write("y.py")]
    assert effects("sed -i.bak -e 's/a/b/' x.py") == [write("x.py")]
    assert effects("sed -i '' 's/a/b/' x.py") == [write("x.py")]


def test_redirections_write_their_target():
    assert effects("echo hi > out.txt") == [write("out.txt")]
    assert effects("echo hi >> log.txt 2>&1") == [write("log.txt")]
    assert effects("make 2> errors.txt") == [write("errors.txt")]


def test_redirections_to_devices_and_descriptors_write_nothing():
    assert effects("make > /dev/null 2>&1") == []
    assert effects("echo hi >&2") == []


def test_tee_writes_its_files_and_passes_the_content_on():
    assert effects("echo x | tee -a a.txt b.txt") == [write("a.txt"), write("b.txt")]
    assert effects("cat x.py | tee copy.py") == [write("copy.py"), read("x.py")]


def test_a_heredoc_into_a_file_writes_it():
    assert effects("cat <<'EOF' > /testbed/test_enum.py\nimport enum\nprint(1)\nEOF") == [
        write("/testbed/test_enum.py")]
    assert effects("cat > reproduce.py << 'EOF'\nx = 'a > b'\nEOF\n") == [write("reproduce.py")]
    assert effects("cat <<EOF > notes.txt\nhello $USER\nEOF") == [write("notes.txt")]


def test_an_unterminated_heredoc_still_writes_its_file():
    assert effects("cat > x.py <<'EOF'\nprint(1)\n") == [write("x.py")]


def test_commands_after_a_quoted_heredoc_keep_their_subshells_and_loops():
    # bashlex reads past `<<'EOF'` only once our lexer has written the delimiter unquoted for it;
    # the flat fallback reading would claim nothing from the subshell or the loop on
    command = "cat > fix.py <<'EOF'\nprint(1)\nEOF\n(cd sub && cat a.py); for f in 1 2; do sed -i 's/a/b/' b.py; done"
    assert effects(command, cwd="/r") == [write("/r/fix.py"), read("/r/sub/a.py"), write("/r/b.py")]


def test_a_tab_stripping_heredoc_ends_at_its_indented_delimiter():
    # `<<-` strips the leading tabs of the body and of the delimiter's line: the script is the
    # body without them, and the command after the delimiter runs
    command = "python3 - <<-'EOF'\n\twith open('out.txt', 'w') as f:\n\t    f.write('x')\n\tEOF\ncat y.py"
    assert effects(command) == [write("out.txt"), read("y.py")]


def test_cp_writes_the_destination_and_does_not_read_the_source():
    assert effects("cp src/x.py src/x.py.backup") == [write("src/x.py.backup")]
    assert effects("cp src/x.py backup/") == [write("backup/x.py")]
    assert effects("cp a.py b.py dest") == [write("dest/a.py"), write("dest/b.py")]


def test_cp_and_mv_verbose_write_as_without_it():
    # --verbose only prints what was done: the copy or move is the same
    assert effects("cp --verbose src/x.py src/x.py.backup") == [write("src/x.py.backup")]
    assert effects("cp -v --verbose a.py dest/") == [write("dest/a.py")]
    assert effects("mv --verbose old.py new.py") == [write("old.py"), write("new.py")]


def test_a_recursive_cp_claims_nothing():
    assert effects("cp -r src/ dst/") == []


def test_mv_writes_both_names():
    assert effects("mv old.py new.py") == [write("old.py"), write("new.py")]


def test_rm_writes_each_file():
    assert effects("rm reproduce.py test_x.py") == [write("reproduce.py"), write("test_x.py")]


def test_an_inline_git_patch_writes_each_file_it_names():
    patch = (
        "git apply <<'EOF'\n"
        "diff --git a/src/x.py b/src/x.py\n"
        "--- a/src/x.py\n"
        "+++ b/src/x.py\n"
        "@@ -1 +1 @@\n"
        "-a\n"
        "+b\n"
        "--- /dev/null\n"
        "+++ b/src/new.py\n"
        "@@ -0,0 +1 @@\n"
        "+c\n"
        "--- a/src/gone.py\n"
        "+++ /dev/null\n"
        "@@ -1 +0,0 @@\n"
        "-d\n"
        "EOF"
    )
    assert effects(patch, cwd="/repo") == [
        write("/repo/src/x.py"), write("/repo/src/new.py"), write("/repo/src/gone.py")]


def test_git_apply_strips_as_many_leading_components_as_its_p_option_says():
    patch = "--- a/b/x.py\n+++ a/b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert effects(f"git apply -p2 <<'EOF'\n{patch}EOF", cwd="/repo") == [write("/repo/x.py")]
    assert effects(f"git apply -p 0 -v <<'EOF'\n{patch}EOF", cwd="/repo") == [write("/repo/a/b/x.py")]


def test_an_inline_patch_piped_from_cat_writes_its_files():
    command = "cat <<'EOF' | patch -p1\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\nEOF"
    assert effects(command) == [write("x.py")]


def test_a_git_apply_check_writes_nothing():
    assert effects("git apply --check <<'EOF'\n--- a/x.py\n+++ b/x.py\nEOF") == []


def test_a_python_heredoc_writes_the_files_it_opens_for_writing():
    command = (
        "python - <<'EOF'\n"
        "import re\n"
        "with open('django/x.py') as f:\n"
        "    s = f.read()\n"
        "with open('django/x.py', 'w') as f:\n"
        "    f.write(s.replace('a', 'b'))\n"
        "EOF"
    )
    assert effects(command, cwd="/testbed") == [write("/testbed/django/x.py")]


def test_python_c_writes_literal_paths_opened_for_writing():
    assert effects("""python3 -c "open('out.txt', 'a').write('x')" """) == [write("out.txt")]
    assert effects("""python -c "from pathlib import Path; Path('a.py').write_text('x')" """) == [
        write("a.py")]


def test_a_python_here_string_writes_what_it_opens_even_when_bashlex_refuses_the_command():
    # `$((...))` sends the command to our own lexer's flat reading: the here-string is still the
    # script python runs on its stdin
    command = """echo $((1 + 2)); python3 <<< "open('out.txt', 'w').write('x')" """
    assert effects(command, cwd="/r") == [write("/r/out.txt")]


def test_a_script_that_only_reads_writes_nothing():
    assert effects("python3 <<EOF\nprint(open('x.py').read())\nEOF") == []


def test_a_script_written_by_a_heredoc_and_run_in_the_same_command_writes_its_files():
    command = (
        "cd /testbed && cat > fix.py << 'EOF'\n"
        "p = 'astropy/x.py'\n"
        "s = open(p).read()\n"
        "open(p, 'w').write(s)\n"
        "EOF\n"
        "python fix.py"
    )
    assert effects(command) == [write("/testbed/fix.py"), write("/testbed/astropy/x.py")]


# --- lists, pipes and directories -----------------------------------------------------------


def test_cd_moves_later_relative_paths():
    assert effects("cd /testbed && sed -n '120,160p' django/x.py") == [read("/testbed/django/x.py", "120-160")]
    assert effects("cd sub; cat x.py", cwd="/repo") == [read("/repo/sub/x.py")]
    assert effects("cat ./a.py", cwd="/repo") == [read("/repo/a.py")]


def test_pushd_moves_later_relative_paths_and_popd_loses_them():
    assert effects("pushd /testbed > /dev/null && head -n 3 x.py", cwd="/r") == [read("/testbed/x.py", "1-3")]
    # popd goes back to a directory the command does not name: relative paths claim nothing after it
    assert effects("pushd sub; sed -n '3,4p' x.py; popd; cat y.py /etc/hosts", cwd="/r") == [
        read("/r/sub/x.py", "3-4"), read("/etc/hosts")]


def test_a_cd_we_cannot_follow_makes_later_relative_paths_claim_nothing():
    assert effects("cd $DIR && cat x.py /etc/hosts") == [read("/etc/hosts")]
    assert effects("cd - && cat x.py") == []


def test_a_cd_in_a_subshell_stays_there():
    assert effects("(cd sub && cat a.py); cat b.py", cwd="/r") == [read("/r/sub/a.py"), read("/r/b.py")]


def test_effects_after_an_or_claim_nothing():
    assert effects("cat a.py || cat b.py") == [read("a.py")]
    assert effects("test -f x || sed -i 's/a/b/' x.py && cat y.py; cat z.py") == [read("z.py")]


def test_lists_keep_command_order_and_each_claim_once():
    assert effects("sed -i 's/a/b/' x.py && cat x.py; cat x.py\ncat x.py | head -3") == [
        write("x.py"), read("x.py"), read("x.py", "1-3")]


def test_a_group_shares_the_directory_and_its_redirect():
    assert effects("{ cd sub; cat a.py; } > out.txt", cwd="/r") == [write("/r/out.txt")]


def test_a_for_loop_over_literal_words_runs_its_body():
    assert effects("for i in 1 2; do sed -i 's/a/b/' x.py; done") == [write("x.py")]


def test_if_and_while_bodies_claim_nothing():
    assert effects("if grep -q x a.py; then sed -i 's/a/b/' a.py; fi") == []
    assert effects("while true; do rm x.py; done") == []


def test_nothing_after_exit_runs():
    assert effects("exit 1; rm x.py") == []


def test_a_nonzero_returncode_drops_the_writes_and_keeps_the_reads():
    command = "cat a.py && sed -i 's/a/b/' a.py"
    assert effects(command, returncode=1) == [read("a.py")]
    assert effects(command, returncode=0) == [read("a.py"), write("a.py")]


def test_bash_isms_bashlex_refuses_still_read_the_plain_parts():
    assert effects("[[ -f x.py ]] && cat x.py") == [read("x.py")]
    assert effects("echo $((1 + 2)); head -n 3 x.py") == [read("x.py", "1-3")]


# --- robustness -----------------------------------------------------------------------------


def test_malformed_input_claims_nothing_and_never_raises():
    for command in ["cat 'x.py", 'sed -i "s/a/b/ x.py', "cat $(x", "cat `x", "\0\xff\x01 >",
                    "cat > x <<", "| | ;;", "", "((", "case x in a) cat f;; esac", "}", "cat <(ls)"]:
        assert isinstance(effects(command), list)
    assert effects("cat 'x.py") == []
    assert effects(None) == []  # type: ignore[arg-type]


def test_a_command_or_cwd_that_is_not_a_string_claims_nothing_and_never_raises():
    # a caller may hand on a model's JSON argument as it came (a list), or a cwd as a Path
    assert effects(["cat", "x.py"]) == []  # type: ignore[arg-type]
    assert effects(["cat", "x.py"], cwd="/r") == []  # type: ignore[arg-type]
    assert effects("cat x.py", cwd=Path("/r")) == []  # type: ignore[arg-type]
    assert effects("cat x.py", cwd="/r") == [read("/r/x.py")]


def test_a_word_that_makes_bashlex_loop_forever_is_read_without_it():
    # bashlex 0.18 never returns on `${` without its `}` in a word of mixed quoting
    assert effects("cat '${x'b && cat a.py") == [read("a.py")]


def test_a_sed_with_an_unbalanced_quote_from_a_real_trace_claims_nothing():
    # bash itself refused it (the run's returncode was 2)
    command = r"cd /testbed && sed -i '935a\    # if it doesn\'t match the cached object\'s pk.' base.py"
    assert effects(command) == []


def _trace_commands() -> list[tuple[str, str]]:
    assert TRACES.is_dir(), f"the shared traces are missing: {TRACES} (the `shared/` folder beside the repository, or $CTXENG_TRACES)"
    commands = []
    for path in sorted((TRACES / "mini-swe-agent").glob("*.json")):
        for message in json.loads(path.read_text())["messages"]:
            for call in message.get("tool_calls") or []:
                commands.append((call["id"], json.loads(call["function"]["arguments"])["command"]))
    for path in sorted((TRACES / "swe-agent").glob("*.traj")):
        for message in json.loads(path.read_text())["history"]:
            calls = message.get("tool_calls") or []
            for call in ast.literal_eval(calls) if isinstance(calls, str) else calls:
                if call["function"]["name"] == "bash":
                    commands.append((call["id"], json.loads(call["function"]["arguments"])["command"]))
    return commands


def test_every_command_of_the_shared_traces_parses_without_raising():
    commands = _trace_commands()
    assert len(commands) > 300
    for _, command in commands:
        found = effects(command, cwd="/testbed")
        assert all(e.access in ("read", "write") and e.path.startswith("/") for e in found)


def test_the_traces_heredoc_edit_through_a_python_script_is_a_write():
    commands = dict(_trace_commands())
    # cat > patch_enum_serializer.py << 'EOF' ... EOF, then python patch_enum_serializer.py
    assert effects(commands["call_00_ElwOor1Bq14HsvwWMjW1BbQT"], cwd="/testbed") == [
        write("/testbed/patch_enum_serializer.py"), write("/testbed/django/db/migrations/serializer.py")]
