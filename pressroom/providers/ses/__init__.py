"""Amazon SES, one implementation of the email provider port: its client (client.py, SES API v2
signed with botocore's SigV4), its settings (settings.py, the AWS variables), its events
(events.py) and SNS's signed pushes (push.py). Only the wiring imports this package."""

from pressroom.providers.ses.client import LIMITS, SES_MAX_DESTINATIONS, SesClient, ses_template
from pressroom.providers.ses.events import PROVIDER, parse_event, tag_text, tag_value

__all__ = ["LIMITS", "PROVIDER", "SES_MAX_DESTINATIONS", "SesClient", "parse_event", "ses_template", "tag_text",
           "tag_value"]
