-- Data as a version-6 daemon wrote it: the version-1 data, and a session whose
-- log has a validity change and a drain decision, which version 7 links to the
-- checkpoints they judged (events.checkpoint_seq).
INSERT INTO sessions (id, repo, repo_key, role, issue, pr, branch, worktree, capabilities, state,
    created_at, updated_at, current_run_id, run_seq, checkpoint_seq, event_seq, head, validity, validity_at)
VALUES ('ses_seed1', 'Acme/Widgets', 'acme/widgets', 'author', 12, 34, 'fix-12', '/srv/w1', '["git.push"]', 'active',
    1764504000000000, 1764504000000000, 'run_seed1', 1, 2, 4, '0123456789abcdef0123456789abcdef01234567',
    'unverified', 1764504000000000);
INSERT INTO runs (id, session_id, fencing_token, agent, started_at)
VALUES ('run_seed1', 'ses_seed1', 1, '{"runtime":"claude-code"}', 1764504000000000);
INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage, branch, head,
    digest, redactions, complete, missing, document)
VALUES ('ses_seed1', 1, NULL, 'run_seed1', 1, 1764504000000000, 'planned', 'fix-12', '0123456789abcdef0123456789abcdef01234567',
    'hmac-sha256:v1:aa', 0, false, '["next_action"]',
    '{"fencing_token":1,"role":"author","run_id":"run_seed1","schema_version":1,"stage":"planned"}'),
       ('ses_seed1', 2, 1, 'run_seed1', 1, 1764504001000000, 'implementing', 'fix-12', '0123456789abcdef0123456789abcdef01234567',
    'hmac-sha256:v1:bb', 1, true, '[]',
    '{"fencing_token":1,"note":"[REDACTED:github_token]","role":"author","run_id":"run_seed1","schema_version":1,"stage":"implementing"}');
INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES
    ('ses_seed1', 1, 1764504000000000, 'session.created', 'run_seed1', '{}'),
    ('ses_seed1', 2, 1764504000000000, 'run.started', 'run_seed1', '{}'),
    ('ses_seed1', 3, 1764504000000000, 'checkpoint.written', 'run_seed1', '{"seq":1}'),
    ('ses_seed1', 4, 1764504001000000, 'checkpoint.written', 'run_seed1', '{"seq":2}');
INSERT INTO api_tokens (id, name, role, scopes, hash, created_at)
VALUES ('tok_seed1', 'seed', 'agent', '["acme/*"]', 'c0ffee', 1764504000000000);
INSERT INTO settings (name, value) VALUES ('key_fingerprint:k1', 'sha256:0011223344556677');
INSERT INTO sessions (id, repo, repo_key, role, state, created_at, updated_at, current_run_id, run_seq,
    checkpoint_seq, event_seq, validity, validity_at)
VALUES ('ses_seed6', 'acme/widgets', 'acme/widgets', 'author', 'active', 1764504000000000, 1764504000000000,
    'run_seed6', 1, 2, 6, 'valid', 1764504000000000);
INSERT INTO runs (id, session_id, fencing_token, agent, started_at)
VALUES ('run_seed6', 'ses_seed6', 1, '{}', 1764504000000000);
INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, digest, complete, document)
VALUES ('ses_seed6', 1, NULL, 'run_seed6', 1, 1764504001000000, 'hmac-sha256:v1:cc', true, '{}'),
       ('ses_seed6', 2, 1, 'run_seed6', 1, 1764504003000000, 'hmac-sha256:v1:dd', true, '{}');
INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES
    ('ses_seed6', 1, 1764504000000000, 'validity.changed', '', '{"from":"unverified","to":"stale"}'),
    ('ses_seed6', 2, 1764504001000000, 'checkpoint.written', 'run_seed6', '{"seq":1}'),
    ('ses_seed6', 3, 1764504001000000, 'validity.changed', '', '{"from":"stale","to":"valid","checkpoint_seq":1}'),
    ('ses_seed6', 4, 1764504002000000, 'drain.blocked', '', '{}'),
    ('ses_seed6', 5, 1764504003000000, 'checkpoint.written', 'run_seed6', '{"seq":2}'),
    ('ses_seed6', 6, 1764504004000000, 'drain.completed', '', '{"checkpoint_seq":2}');
-- Version 30 keeps why a session ended and who ended it on the session; the
-- ones ended before take both from their session.ended event.
INSERT INTO sessions (id, repo, repo_key, role, state, outcome, created_at, updated_at, ended_at, current_run_id,
    run_seq, checkpoint_seq, event_seq, validity, validity_at)
VALUES ('ses_seed6e', 'acme/widgets', 'acme/widgets', 'author', 'ended', 'abandoned', 1764504000000000,
    1764504002000000, 1764504002000000, 'run_seed6e', 1, 0, 2, 'unverified', 1764504000000000);
INSERT INTO runs (id, session_id, fencing_token, agent, started_at)
VALUES ('run_seed6e', 'ses_seed6e', 1, '{}', 1764504000000000);
INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES
    ('ses_seed6e', 1, 1764504001000000, 'session.ended', 'run_seed6e', '{"outcome":"abandoned","reason":"first try"}'),
    ('ses_seed6e', 2, 1764504002000000, 'session.ended', 'run_seed6e', '{"by":{"name":"alice","token_id":"tok_1"},"outcome":"abandoned","reason":"host died"}')
