-- +goose Up
-- Rows from before checkpoints kept a digest (00013 gave them '') are
-- named here, once, as the migration that knows them: from now on an empty
-- document_digest is not "written before digests" but a digest lost, and
-- the checkpoint reads as corrupt (store/checkpoint_read.go).
UPDATE checkpoints SET document_digest = 'legacy:before-00013' WHERE document_digest = '';

-- +goose Down
UPDATE checkpoints SET document_digest = '' WHERE document_digest = 'legacy:before-00013';
