"""The :name -> $n translator: what it numbers, what it leaves alone, what it refuses."""

import pytest

from app.engine.sql_params import translate


def test_names_are_numbered_in_order_of_first_use_and_bind_follows_that_order():
    s = translate("SELECT * FROM jobs WHERE id = :job_id AND run_id = :run_id")
    assert s.sql == "SELECT * FROM jobs WHERE id = $1 AND run_id = $2"
    assert s.names == ("job_id", "run_id")
    assert s.bind(run_id="r", job_id="j") == (s.sql, "j", "r")


def test_a_name_used_twice_is_one_parameter():
    s = translate("SELECT :a, :b, :a")
    assert s.sql == "SELECT $1, $2, $1"
    assert s.bind(a=1, b=2) == (s.sql, 1, 2)


def test_casts_stay_casts():
    s = translate("WHERE lane = ANY(:lanes::uuid[]) AND x::text = :t::text AND a[1:2] = '{}'::int[]")
    assert s.sql == "WHERE lane = ANY($1::uuid[]) AND x::text = $2::text AND a[1:2] = '{}'::int[]"
    assert s.names == ("lanes", "t")


def test_an_array_slice_between_names_is_no_parameter():
    s = translate("SELECT a[lo:hi], a[1:n], a[1 : :k]")
    assert s.sql == "SELECT a[lo:hi], a[1:n], a[1 : $1]"
    assert s.names == ("k",)


@pytest.mark.parametrize("text", [
    "SELECT ':quoted', 'it''s :not'",
    "SELECT E'\\' :escaped'",
    'SELECT "odd:column", "a"":b"',
    "SELECT 1 -- a :comment\n",
    "SELECT 1 /* outer /* :nested */ :still */",
    "SELECT $$ :dollar $$, $fn$ :tagged $$ :x $fn$",
])
def test_literals_identifiers_comments_and_dollar_quotes_are_left_alone(text):
    s = translate(text)
    assert s.sql == text
    assert s.names == ()


def test_the_text_after_a_literal_is_translated_again():
    s = translate("SELECT 'a:b', :after -- :c\n, /* :d */ :more, $q$:e$q$, :last")
    assert s.sql == "SELECT 'a:b', $1 -- :c\n, /* :d */ $2, $q$:e$q$, $3"
    assert s.names == ("after", "more", "last")


def test_a_missing_keyword_is_a_type_error_naming_it():
    s = translate("SELECT :run_id, :limit")
    with pytest.raises(TypeError, match="missing limit"):
        s.bind(run_id=1)


def test_an_unknown_keyword_is_a_type_error_naming_it():
    s = translate("SELECT :run_id")
    with pytest.raises(TypeError, match="unknown limt"):
        s.bind(run_id=1, limt=5)


def test_a_statement_without_parameters_binds_nothing():
    s = translate("SELECT now()")
    assert s.bind() == ("SELECT now()",)
    with pytest.raises(TypeError, match="unknown x"):
        s.bind(x=1)


def test_a_positional_parameter_is_refused_with_the_file_named():
    with pytest.raises(ValueError, match=r"claim.sql: positional parameter \$1"):
        translate("SELECT * FROM jobs WHERE id = $1", "claim.sql")
    assert translate("SELECT '$1', $$ $2 $$").names == ()
