"""`sasl.jaas.config` parsing: Kafka's syntax, quoting and escapes, and errors that never
echo a password."""

from __future__ import annotations

import pytest

from oncelog.security.sasl import parse_jaas_config, parse_plain_jaas_users
from oncelog.security.sasl.oauthbearer import OAuthBearerSettings

PLAIN_CONFIG = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_plain_users_are_the_user_options():
    assert parse_plain_jaas_users(PLAIN_CONFIG) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_entry_parts():
    entry = parse_jaas_config(PLAIN_CONFIG)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options["username"] == "admin"
    module, flag, options = entry  # a tuple too
    assert (module, flag, len(options)) == (entry.login_module, "required", 4)


def test_escapes_quotes_comments_and_layout():
    config = """
        // the broker's users
        org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED /* flags ignore case */
            user_bob='it\\'s'
            user_carol="quote \\" backslash \\\\ tab \\t newline \\n octal \\101\\0 other \\q"
            user_dave='semi;colon = equals'
            user_erin=bare-word_$1.5
            ;
    """
    users = parse_plain_jaas_users(config)
    assert users["carol"] == 'quote " backslash \\ tab \t newline \n octal A\x00 other q'
    assert users["dave"] == "semi;colon = equals"
    assert users["erin"] == "bare-word_$1.5"
    assert users["bob"] == "it's"


def test_adjacent_quoted_strings_are_not_one_value():
    with pytest.raises(ValueError, match="expected an option name"):
        parse_jaas_config("M required a='x''y';")


@pytest.mark.parametrize("flag", ["required", "Requisite", "SUFFICIENT", "optional"])
def test_control_flags(flag):
    assert parse_jaas_config(f"Module {flag};").flag == flag.lower()


@pytest.mark.parametrize("config, message", [
    ("", "login module not specified"),
    ("   // nothing\n", "login module not specified"),
    ("Module;", "control flag not specified"),
    ("Module username=\"admin\";", "invalid login module control flag 'username'"),
    ('Module required user_admin="admin-secret"', "not terminated by a semicolon"),
    ('Module required user_admin;', "value not specified for option 'user_admin'"),
    ('Module required user_admin=;', "value not specified for option 'user_admin'"),
    ('Module required user_admin="admin-secret;', "quoted value opened at offset 27 is not closed"),
    ('Module required user_admin="admin\nsecret";', "is not closed on its line"),
    ('Module required user_admin=admin!secret;', "unexpected character at offset 32"),
    ('Module required a="1" a="2";', "option 'a' is given twice"),
    ('Module required; Other required;', "exactly one login module entry"),
    ('Module required /* unclosed', "comment opened at offset 16 is not closed"),
    ('"Module" required;', "expected a login module class name"),
])
def test_malformed_configs_are_named_without_echoing_values(config, message):
    with pytest.raises(ValueError, match="JAAS config") as failure:
        parse_jaas_config(config)
    assert message in str(failure.value)
    assert "secret" not in str(failure.value)


def test_plain_users_need_the_plain_login_module():
    with pytest.raises(ValueError, match="PlainLoginModule"):
        parse_plain_jaas_users('org.apache.kafka.common.security.scram.ScramLoginModule required user_a="b";')
    with pytest.raises(ValueError, match="names no user"):
        parse_plain_jaas_users('org.apache.kafka.common.security.plain.PlainLoginModule required user_="b";')


def test_oauthbearer_server_options():
    entry = parse_jaas_config(
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="thePrincipalName" unsecuredValidatorPrincipalClaimName="principal" '
        'unsecuredValidatorScopeClaimName="scp" unsecuredValidatorRequiredScope="read write" '
        'unsecuredValidatorAllowableClockSkewMs="30000";')
    assert OAuthBearerSettings.from_jaas_options(entry.options) == OAuthBearerSettings(
        principal_claim_name="principal", scope_claim_name="scp", required_scope=("read", "write"),
        allowable_clock_skew_ms=30000)
    assert OAuthBearerSettings.from_jaas_options({}) == OAuthBearerSettings()
    with pytest.raises(ValueError, match="unsecuredValidatorAllowableClockSkewMs"):
        OAuthBearerSettings.from_jaas_options({"unsecuredValidatorAllowableClockSkewMs": "soon"})
    with pytest.raises(ValueError, match="negative"):
        OAuthBearerSettings.from_jaas_options({"unsecuredValidatorAllowableClockSkewMs": "-1"})
    with pytest.raises(ValueError, match="invalid scope element"):
        OAuthBearerSettings.from_jaas_options({"unsecuredValidatorRequiredScope": 'a "b"'})
