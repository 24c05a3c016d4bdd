"""The console on a broker with an authorizer: the page shows only its sign-in form until
someone signs in with a SASL user's password, then draws what that principal may
DESCRIBE, with exactly one of "Sign in" and "Sign out" drawn before and after; an
operator holding Cluster ALTER aborts an open transaction from the page (its producer is
fenced); anyone else sees no button, and the abort endpoint refuses requests without
credentials, without the right, or without the console's own header (a page of another
site cannot send it)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from confluent_kafka.admin import ResourceType as AdminResourceType
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64

from oncelog.client.wire import Cluster
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.browser import chromium
from tests.support.secured import secured_broker


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    config = {"http.listener": "127.0.0.1:0",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    with secured_broker(tmp_path_factory.mktemp("console-actions"), config) as broker:
        broker.create_topic("payments")
        broker.create_topic("ledger")
        producer = Producer({**broker.client("admin"), "transactional.id": "stuck-payments"})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("payments", b"pending")
        producer.flush(10)
        ledger = Producer({**broker.client("admin"), "transactional.id": "ledger-writer"})
        ledger.init_transactions(10)
        ledger.begin_transaction()
        ledger.produce("ledger", b"pending")
        ledger.flush(10)
        # alice may describe the payments side only; the ledger's topic and transaction are not hers to see.
        broker.allow("alice", ResourceType.TOPIC, "payments", AclOperation.DESCRIBE)
        broker.allow("alice", ResourceType.TRANSACTIONAL_ID, "stuck-payments", AclOperation.DESCRIBE)
        host, port = broker.running.broker.http.address
        with chromium() as browser:
            yield {"url": f"http://{host}:{port}", "browser": browser, "producer": producer, "broker": broker}


def post_abort(url: str, user: str | None, *, console_header: bool = True) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if console_header:
        headers["X-Oncelog-Console"] = "1"
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{user}-secret".encode()).decode()
    request = urllib.request.Request(url + "/api/transactions/abort", method="POST", headers=headers,
                                     data=json.dumps({"transactional_id": "stuck-payments"}).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def api(url: str, path: str, user: str | None, body: dict | None = None) -> tuple[int, dict]:
    """(HTTP status, JSON) of one console API call: GET, or POST of `body` with the
    console's header; signed in as `user` (its password is `<user>-secret`) unless None."""
    headers = {} if user is None else {
        "Authorization": "Basic " + base64.b64encode(f"{user}:{user}-secret".encode()).decode()}
    data = None
    if body is not None:
        headers.update({"Content-Type": "application/json", "X-Oncelog-Console": "1"})
        data = json.dumps(body).encode()
    request = urllib.request.Request(url + path, method="GET" if body is None else "POST", headers=headers, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def drawn_buttons(page) -> list[str]:
    """The header's buttons drawn on the page (Playwright's :visible: a box on the page)."""
    return page.locator("header button:visible").all_inner_texts()


def sign_in(page, user: str, password: str) -> None:
    page.fill("#sign-in-user", user)
    page.fill("#sign-in-password", password)
    page.click("#sign-in button[type=submit]")


def test_the_page_shows_only_its_sign_in_form_until_then_what_the_principal_may_describe(scene):
    page = scene["browser"].new_page()
    try:
        page.goto(scene["url"] + "/")
        page.wait_for_selector("#sign-in", state="visible", timeout=15_000)
        # Computed visibility, not the attribute: a stylesheet's display must not show a hidden element.
        assert page.locator("#signed-in").is_hidden()
        assert drawn_buttons(page) == ["Sign in"]
        assert page.locator("#transactions tr[data-txn], #partitions tr[data-partition]").count() == 0
        assert page.evaluate("document.body.dataset.signIn") == "required"  # the API answered 401
        assert "Sign in to see this broker." in page.inner_text("#transactions")
        sign_in(page, "alice", "alice-secret")
        page.wait_for_selector('#transactions tr[data-txn="stuck-payments"]', timeout=10_000)
        assert page.locator("#sign-in").is_hidden() and page.locator("#signed-in").is_visible()
        assert drawn_buttons(page) == ["Sign out"] and page.locator("#sign-in input:visible").count() == 0
        assert page.locator("#transactions tr[data-txn]").count() == 1  # not ledger-writer's
        page.check("#show-internal")
        assert page.locator("#partitions tr[data-partition]").all_inner_texts()[0].startswith("payments-0")
        assert page.locator("#partitions tr[data-partition]").count() == 1  # neither ledger nor internal topics
        totals = page.locator('[data-card="committed / aborted"] .value').inner_text()
        assert totals == "\u2013 / \u2013"  # dashes: the coordinator's totals need Cluster DESCRIBE
        page.click("#sign-out")
        page.wait_for_selector("#sign-in", state="visible")
        assert drawn_buttons(page) == ["Sign in"]
        assert page.locator("#transactions tr[data-txn]").count() == 0
        sign_in(page, "admin", "admin-secret")  # a super user sees everything
        page.wait_for_selector('#transactions tr[data-txn="ledger-writer"]', timeout=10_000)
        assert page.locator('#partitions tr[data-partition="ledger-0"]').count() == 1
        assert drawn_buttons(page) == ["Sign out"]
    finally:
        page.close()


def test_the_abort_endpoint_refuses_forgeries_strangers_and_the_unauthorized(scene):
    url = scene["url"]
    assert post_abort(url, "admin", console_header=False)[0] == 403  # what another site's page would send
    assert post_abort(url, None)[0] == 401
    status, answer = post_abort(url, "alice")  # signed in, no Cluster ALTER
    assert status == 403 and "Cluster ALTER" in answer["error"]


def test_only_an_operator_with_cluster_alter_gets_the_abort_button_and_it_fences_the_producer(scene):
    page = scene["browser"].new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        page.goto(scene["url"] + "/")
        page.wait_for_selector("#sign-in:not([hidden])", timeout=15_000)
        sign_in(page, "alice", "wrong")
        page.wait_for_selector("#action-result:not([hidden])")
        assert "Sign-in failed" in page.inner_text("#action-result")
        sign_in(page, "alice", "alice-secret")
        page.wait_for_selector("#signed-in:not([hidden])")
        assert "User:alice (may not abort transactions)" in page.inner_text("#signed-in")
        page.wait_for_selector('#transactions tr[data-txn="stuck-payments"]')
        assert page.locator("button[data-abort]").count() == 0
        page.click("#sign-out")
        sign_in(page, "admin", "admin-secret")
        page.wait_for_selector('button[data-abort="stuck-payments"]', timeout=10_000)
        page.click('button[data-abort="stuck-payments"]')
        page.wait_for_selector("#action-result:not([hidden])")
        assert "aborting the transaction of 'stuck-payments'" in page.inner_text("#action-result")
        page.wait_for_function(
            "() => !document.querySelector('#transactions tr[data-txn=\"stuck-payments\"]')", timeout=10_000)
    finally:
        page.close()
    with pytest.raises(KafkaException, match=r"(?i)fenced|epoch"):
        scene["producer"].commit_transaction(10)


def test_the_message_browser_needs_topic_read_as_a_fetch_of_the_records_would(scene):
    assert api(scene["url"], "/api/topics/payments/records", None)[0] == 401
    assert api(scene["url"], "/api/topics/payments/records", "alice") == (
        403, {"error": "User:alice may not read topic 'payments' (needs Topic READ)"})  # DESCRIBE is not enough
    status, page = api(scene["url"], "/api/topics/ledger/records", "admin")  # ledger-writer's transaction stays open
    assert status == 200
    assert [(r["value"]["text"], r["status"]) for r in page["records"]] == [("pending", "open")]


def test_the_acls_and_quotas_are_shown_read_only_to_whom_describe_acls_and_quotas_would_answer(scene):
    properties = {key: str(value) for key, value in scene["broker"].client("admin").items()}
    request = AlterClientQuotasRequest(entries=(EntryData(
        entity=(EntityData(entity_type="user", entity_name="bob"),),
        ops=(OpData(key="producer_byte_rate", value=f64(1024.0), remove=False),)),), validate_only=False)
    with Cluster(properties.pop("bootstrap.servers"), properties=properties) as cluster:
        assert [entry.error_code for entry in cluster.request(request).entries] == [ErrorCode.none]
    assert api(scene["url"], "/api/security", "alice") == (
        403, {"error": "User:alice may not describe ACLs or quotas (needs Cluster DESCRIBE or DESCRIBE_CONFIGS)"})
    status, answer = api(scene["url"], "/api/security", "admin")
    assert status == 200 and answer["authorizer"] is True
    assert {"resource_type": "TOPIC", "name": "payments", "pattern_type": "LITERAL", "principal": "User:alice",
            "host": "*", "operation": "DESCRIBE", "permission": "ALLOW"} in answer["acls"]
    assert answer["quotas"] == [{"entity": [{"type": "user", "name": "bob"}], "values": {"producer_byte_rate": 1024.0}}]

    page = scene["browser"].new_page()
    page.goto(scene["url"] + "/")
    sign_in(page, "admin", "admin-secret")
    page.wait_for_selector("#signed-in:not([hidden])", timeout=10_000)  # the session is set: the views may ask
    page.click("#security summary")
    page.wait_for_selector("#security[data-loaded]", state="attached", timeout=10_000)
    page.fill("#acls-filter", "alice topic")  # every word: the transactional id's ACL is left out
    assert [row.inner_text().split("\t")[:4] for row in page.locator("#acls tbody tr").all()] == [
        ["TOPIC", "payments", "LITERAL", "User:alice"]]
    assert page.locator("#quotas tbody tr").inner_text().split("\t") == ["user=bob", "producer_byte_rate=1024"]
    page.close()


def test_a_groups_offsets_are_reset_after_a_dry_run_only_when_it_is_empty_and_only_by_a_reader(scene):
    broker = scene["broker"]
    broker.create_topic("reset-orders")
    producer = Producer(broker.client("admin"))
    for i in range(5):
        producer.produce("reset-orders", str(i).encode())
    producer.flush(10)
    committer = Consumer({**broker.client("admin"), "group.id": "resettable"})
    committer.commit(offsets=[TopicPartition("reset-orders", 0, 3)], asynchronous=False)
    committer.close()
    plan = {"group": "resettable", "topic": "reset-orders", "to": "earliest", "dry_run": True}

    def reset(user: str, body: dict) -> tuple[int, dict]:
        return api(scene["url"], "/api/groups/reset-offsets", user, body)

    assert reset("alice", plan) == (403, {
        "error": "User:alice may not reset the offsets of group 'resettable' on topic 'reset-orders' "
                 "(needs Group READ and Topic READ)"})
    planned = {"group": "resettable", "dry_run": True,
               "offsets": [{"topic": "reset-orders", "partition": 0, "current": 3, "target": 0}]}
    assert reset("admin", plan) == (200, planned)
    assert reset("admin", plan) == (200, planned)  # a dry run changes nothing
    status, done = reset("admin", {**plan, "to": "offset", "value": 99, "dry_run": False})
    assert (status, done["offsets"][0]["target"]) == (200, 5)  # clamped to the high watermark, as the tool does
    assert reset("admin", plan)[1]["offsets"][0]["current"] == 5
    assert reset("admin", {**plan, "to": "sideways"}) == (
        400, {"error": "to must be one of earliest, latest, timestamp, offset"})

    member = Consumer({**broker.client("admin"), "group.id": "resettable", "auto.offset.reset": "earliest"})
    member.subscribe(["reset-orders"])
    try:
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        status, answer = reset("admin", plan)
        assert status == 409
        assert answer["error"].startswith("Assignments can only be reset if the group 'resettable' is inactive")
        for group_id, protocol in (("resettable", "classic"), ("kip-848-readers", "consumer")):
            if protocol == "consumer":  # a KIP-848 member too: its assignment comes from ConsumerGroupDescribe
                other = Consumer({**broker.client("admin"), "group.id": group_id, "group.protocol": "consumer"})
                other.subscribe(["reset-orders"])
                deadline = time.monotonic() + 20
                while not other.assignment() and time.monotonic() < deadline:
                    other.poll(0.2)
            view = json.load(urllib.request.urlopen(urllib.request.Request(scene["url"] + "/api/console", headers={
                "Authorization": "Basic " + base64.b64encode(b"admin:admin-secret").decode()}), timeout=10))
            [group] = [g for g in view["groups"] if g["group_id"] == group_id]
            assert [(m["client_host"] != "", m["assignment"]) for m in group["member_list"]] == [
                (True, [["reset-orders", [0]]])], protocol
            if protocol == "consumer":
                other.close()
    finally:
        member.close()

    page = scene["browser"].new_page()
    page.goto(scene["url"] + "/")
    sign_in(page, "admin", "admin-secret")
    page.wait_for_selector("#signed-in:not([hidden])", timeout=10_000)
    page.click("#reset summary")
    page.fill("#reset-group", "resettable")
    page.fill("#reset-topic", "reset-orders")
    page.select_option("#reset-to", "earliest")
    page.click("#reset-form button[type=submit]")
    page.wait_for_selector("#reset-plan[data-shown='1']", state="attached", timeout=10_000)
    # the member committed what it read (5) as it left: the plan starts from there
    assert page.locator("#reset-plan tbody tr").inner_text().split("\t")[1:] == ["5", "0"]
    page.click("#reset-execute")
    page.wait_for_selector("#reset-plan[data-shown='2']", state="attached", timeout=10_000)
    assert reset("admin", plan)[1]["offsets"][0]["current"] == 0
    page.close()


def test_a_brokers_configs_need_cluster_describe_configs_before_any_broker_is_asked(scene):
    for query in ("", "?broker=1", "?broker=2"):  # 2: another broker's, had this broker a cluster
        status, answer = api(scene["url"], "/api/broker/configs" + query, "alice")
        assert status == 403 and "Cluster DESCRIBE_CONFIGS" in answer["error"]
    assert api(scene["url"], "/api/broker/configs?broker=2", "admin")[0] == 404  # standalone: no other broker
    assert api(scene["url"], "/api/broker/configs?broker=%D9%A3", "admin")[0] == 400  # an Arabic-Indic 3
    status, answer = api(scene["url"], "/api/broker/configs", "admin")
    assert status == 200
    jaas = {c["name"]: c for c in answer["configs"]}["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas["sensitive"] and jaas["value"] is None  # its users' passwords


def test_a_topics_configs_show_their_source_and_one_is_set_by_whom_may_alter_them(scene):
    def configs(user: str) -> tuple[int, dict]:
        return api(scene["url"], "/api/topics/ledger/configs", user)

    def alter(user: str, body: dict) -> tuple[int, dict]:
        return api(scene["url"], "/api/topics/ledger/configs", user, body)

    assert configs("alice")[0] == 403
    status, answer = configs("admin")
    assert status == 200
    retention = {c["name"]: c for c in answer["configs"]}["retention.ms"]
    assert (retention["value"], retention["source"]) == ("604800000", "DEFAULT_CONFIG")
    assert alter("alice", {"name": "retention.ms", "value": "3600000"})[0] == 403
    assert alter("admin", {"name": "retention.ms", "value": "soon"})[0] == 400
    assert alter("admin", {"name": "retention.ms", "value": "3600000"}) == (
        200, {"message": "retention.ms of ledger set"})
    retention = {c["name"]: c for c in configs("admin")[1]["configs"]}["retention.ms"]
    assert (retention["value"], retention["source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    admin = scene["broker"].admin()  # kept until the answer: a collected client fails its futures
    described = admin.describe_configs([ConfigResource(AdminResourceType.TOPIC, "ledger")])
    [entries] = [future.result(10) for future in described.values()]
    assert entries["retention.ms"].value == "3600000"  # what any client's DescribeConfigs now answers

    page = scene["browser"].new_page()
    page.goto(scene["url"] + "/")
    sign_in(page, "admin", "admin-secret")
    page.wait_for_selector("#signed-in:not([hidden])", timeout=10_000)
    page.click('#topics tr[data-topic="ledger"]')
    page.wait_for_selector("#topic-configs[data-shown='1']", state="attached", timeout=10_000)
    assert page.get_attribute('#topic-configs-table tr[data-config="retention.ms"]', "data-source") == \
        "DYNAMIC_TOPIC_CONFIG"
    page.fill("#topic-config-key", "retention.ms")
    page.fill("#topic-config-value", "")  # empty: the topic's own value goes, the default comes back
    page.click("#topic-config-form button[type=submit]")
    page.wait_for_selector("#topic-configs[data-shown='2']", state="attached", timeout=10_000)
    assert page.get_attribute('#topic-configs-table tr[data-config="retention.ms"]', "data-source") == \
        "DEFAULT_CONFIG"
    page.close()
