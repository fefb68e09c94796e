-- The example pipeline (app/outreach/): site -> brief -> crawl -> contacts -> drafts,
-- with the shared quota ledger, per-campaign daily allowances and the credits ledger.

-- What the brief stage learned from a campaign's home page. One per campaign.
CREATE TABLE briefs (
    campaign_id  uuid PRIMARY KEY REFERENCES campaigns (id) ON DELETE CASCADE,
    url          text NOT NULL,          -- the URL asked for
    final_url    text,                   -- where redirects ended
    status_code  integer,                -- NULL when nothing was fetched (robots.txt)
    title        text NOT NULL DEFAULT '',
    description  text NOT NULL DEFAULT '',
    keywords     text[] NOT NULL DEFAULT '{}',
    language     text,
    note         text,                   -- why there is no crawl, when there is none
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Every page of a campaign's site the crawl has discovered, one row per normalised URL.
-- The row is inserted when the page is discovered (INSERT ... ON CONFLICT DO NOTHING),
-- and only a new row gets a crawl job: a page is fetched at most once per campaign,
-- however many pages link to it.
--   queued      discovered, a crawl job is on its way
--   fetched     a response was recorded (status_code says which; 4xx included)
--   blocked     robots.txt disallows it
--   redirected  the server sent it elsewhere (final_url); the content lives on that page's row
--   skipped     not worth keeping: off-site redirect, not text, too large (note says which)
--   failed      the crawl gave up (server errors, timeouts); error text in note
CREATE TABLE pages (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id   uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    url           text NOT NULL,
    depth         integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    state         text NOT NULL DEFAULT 'queued'
                      CHECK (state IN ('queued', 'fetched', 'blocked', 'redirected', 'skipped', 'failed')),
    status_code   integer,
    final_url     text,
    content_type  text,
    title         text,
    body          text,
    note          text,
    discovered_at timestamptz NOT NULL DEFAULT now(),
    fetched_at    timestamptz,
    UNIQUE (campaign_id, url)
);

-- People to contact, unique per campaign and value, with the page they were found on.
CREATE TABLE contacts (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    kind         text NOT NULL,          -- email, youtube, instagram, tiktok, x, twitch, ...
    value        text NOT NULL,          -- the normalised address or profile URL
    handle       text NOT NULL DEFAULT '',
    page_id      uuid REFERENCES pages (id) ON DELETE SET NULL,
    page_url     text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (campaign_id, value)
);

-- One drafted first message per contact.
CREATE TABLE drafts (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    campaign_id        uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    contact_id         uuid NOT NULL UNIQUE REFERENCES contacts (id) ON DELETE CASCADE,
    job_id             uuid,             -- the draft job that wrote it (no FK: jobs are pruned)
    body               text NOT NULL,
    model              text NOT NULL,    -- 'template', or the LLM model name
    prompt_tokens      integer NOT NULL DEFAULT 0,
    completion_tokens  integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- The shared third-party quota, one row per UTC day. `units` and `reserve` are the
-- limits in force (refreshed from the settings by every spend); `spent` only grows, by
-- one guarded UPDATE, so it can never pass `units`. The reserve is for runs a person
-- started: scheduled runs stop when only the reserve is left.
CREATE TABLE quota_ledger (
    day        date PRIMARY KEY,
    units      integer NOT NULL CHECK (units >= 0),
    reserve    integer NOT NULL CHECK (reserve >= 0),
    spent      integer NOT NULL DEFAULT 0 CHECK (spent >= 0 AND spent <= units),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- What each campaign used of its plan's daily allowances, per UTC day.
CREATE TABLE campaign_usage (
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    day          date NOT NULL,
    pages        integer NOT NULL DEFAULT 0 CHECK (pages >= 0),
    credits      integer NOT NULL DEFAULT 0 CHECK (credits >= 0),
    PRIMARY KEY (campaign_id, day)
);

-- Plan credits, one line per charge and per refund. A job is charged at most once
-- (its retries reuse the charge) and refunded at most once: the unique (job_id, kind)
-- makes a second charge or refund a no-op, whoever attempts it.
CREATE TABLE credit_ledger (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    campaign_id  uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    job_id       uuid NOT NULL,
    day          date NOT NULL,          -- the allowance day the credit came from
    kind         text NOT NULL CHECK (kind IN ('charge', 'refund')),
    credits      integer NOT NULL CHECK (credits > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, kind)
);
CREATE INDEX credit_ledger_campaign_idx ON credit_ledger (campaign_id, created_at);
