"""Drafts by an OpenAI-compatible endpoint served on 127.0.0.1; dormant when unset."""

from __future__ import annotations

from app.outreach.settings import load_outreach_settings
from tests.outreach.conftest import campaign, run


async def test_drafts_come_from_the_llm_with_their_token_counts(pool, site, llm):
    cid = await campaign(pool, site.url + "/")
    result = await run(pool, llm_base_url=f"{llm.url}/v1", llm_model="tiny-chat", llm_api_key="sk-local")
    drafts = await pool.fetch("SELECT d.*, k.value, k.handle FROM drafts d JOIN contacts k ON k.id = d.contact_id "
                              "WHERE d.campaign_id = $1", cid)
    assert len(drafts) == 5 and len(llm.requests) == 5
    for d in drafts:
        assert d["model"] == "tiny-chat" and d["body"].startswith("Hello ") and d["completion_tokens"] == 20
        assert d["prompt_tokens"] > 100
    tokens = sum(d["prompt_tokens"] + d["completion_tokens"] for d in drafts)
    assert result.summary["counts"]["tokens_spent"] == tokens and result.summary["counts"]["llm_calls"] == 5
    run_row = await pool.fetchrow("SELECT summary FROM runs WHERE id = $1", result.run_id)
    assert run_row["summary"]["counts"]["tokens_spent"] == tokens
    # what the endpoint was sent: the model, a bearer token, and the brief in the prompt
    assert {r["model"] for r in llm.requests} == {"tiny-chat"}
    assert {h["authorization"] for h in llm.headers} == {"Bearer sk-local"}
    prompt = llm.requests[0]["messages"][-1]["content"]
    assert "Acme Trail Supply" in prompt and "Ultralight trail gear" in prompt


async def test_a_rate_limited_llm_defers_the_draft_and_keeps_its_charge(pool, site, llm):
    await campaign(pool, site.url + "/")
    llm.reset(429)
    result = await run(pool, llm_base_url=f"{llm.url}/v1", llm_model="tiny-chat")
    assert result.summary["stages"]["draft"] == {"done": 0, "failed": 0, "retried": 0, "deferred": 5}
    drafts = await pool.fetch("SELECT * FROM jobs WHERE type = 'draft'")
    assert {(j["status"], j["attempts"]) for j in drafts} == {("pending", 0)}
    assert "authorization" not in llm.headers[0]  # no key set, none sent
    # charged once each, kept for the retry (which will not pay again)
    assert await pool.fetchval("SELECT count(*) FROM credit_ledger WHERE kind = 'charge'") == 5
    llm.reset(200)
    await pool.execute("UPDATE jobs SET run_after = now() WHERE type = 'draft'")
    again = await run(pool, llm_base_url=f"{llm.url}/v1", llm_model="tiny-chat")
    assert again.summary["counts"]["drafts_written"] == 5 and "credits_spent" not in again.summary["counts"]
    assert await pool.fetchval("SELECT count(*) FROM credit_ledger") == 5


async def test_without_llm_settings_the_template_writes_the_drafts(pool, site, llm):
    assert not load_outreach_settings(llm_base_url=None, llm_model=None).llm_enabled
    await campaign(pool, site.url + "/")
    result = await run(pool)
    assert result.summary["counts"]["drafts_written"] == 5 and "tokens_spent" not in result.summary["counts"]
    body = await pool.fetchval("SELECT body FROM drafts d JOIN contacts k ON k.id = d.contact_id "
                               "WHERE k.value = 'sam@acme.test'")
    assert body.startswith("Hi sam,") and "Acme Trail Supply" in body and "/contacts" in body
    assert llm.requests == []
