"""Who an email goes to, as SQL fragments the lock (is there anyone?) and batch creation share."""

from __future__ import annotations

# The email's audience: subscribers of its newsletter in the chosen statuses, who may receive email,
# are not suppressed, and existed when the email was made. $1 newsletter, $2 statuses, $3 email time.
RECIPIENTS = """
    FROM members m
    JOIN members_newsletters mn ON mn.member_id = m.id AND mn.newsletter_id = $1
    WHERE m.status = ANY($2::text[]) AND NOT m.email_disabled AND m.created_at <= $3
      AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = m.email)
"""


# The audience ($1-$3 as RECIPIENTS) counted by segment (free or not), with the ids of its members
# whose address is not of the plain shape ($4 and $6, pressroom.inputs.PLAIN_ADDRESS and
# PLAIN_DOMAIN_LENGTH) or is in a special-use domain ($5): each of those is checked by
# email-validator before batches are planned. One pass over the audience; most rows are plain.
AUDIENCE_BY_SEGMENT = f"""
    SELECT m.status = 'free' AS free, count(*) AS n,
           coalesce(array_agg(m.id) FILTER (WHERE NOT (
               m.email ~ $4 AND length(m.email) <= 254 AND strpos(m.email, '@') <= 65
               AND length(m.email) - strpos(m.email, '@') <= $6
               AND lower(substring(m.email FROM '[^.]+$')) <> ALL($5::text[]))), '{{}}') AS unplain
    {RECIPIENTS}
    GROUP BY 1
"""
# Leaves out the members recorded as unusable for the email numbered `param`.
NOT_SKIPPED = ("AND NOT EXISTS (SELECT 1 FROM email_skipped_recipients x "
               "WHERE x.email_id = ${param} AND x.member_id = m.id)")
