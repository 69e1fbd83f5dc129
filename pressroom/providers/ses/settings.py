"""SES's settings, in the AWS ecosystem's conventions: the region and the credentials from the
standard AWS variables (AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN),
and Pressroom's own for the sending domain, the configuration set and the SNS topic its events go to.

`PRESSROOM_SES_ENDPOINT_URL` and `PRESSROOM_SES_SNS_DEV_CERTIFICATE` exist for the development
stand-in (devstack/ses_simulator.py) only: production talks to https://email.<region>.amazonaws.com
and trusts only SNS's own certificates.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pressroom.settings import ConfigurationError, read_dev_stack

_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
_TOPIC = re.compile(r"arn:aws[a-z-]*:sns:([a-z0-9-]+):\d{12}:[A-Za-z0-9_-]{1,256}")
_CONFIGURATION_SET = re.compile(r"[A-Za-z0-9_-]{1,64}")


class SesSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    region: str = Field(default="", validation_alias="AWS_REGION")
    access_key_id: str = Field(default="", validation_alias="AWS_ACCESS_KEY_ID")
    secret_access_key: SecretStr = Field(default=SecretStr(""), validation_alias="AWS_SECRET_ACCESS_KEY")
    session_token: SecretStr = Field(default=SecretStr(""), validation_alias="AWS_SESSION_TOKEN")
    domain: str = Field(default="", validation_alias="PRESSROOM_SES_DOMAIN")  # the verified sending identity
    configuration_set: str = Field(default="", validation_alias="PRESSROOM_SES_CONFIGURATION_SET")
    topic_arn: str = Field(default="", validation_alias="PRESSROOM_SES_TOPIC_ARN")
    endpoint_url: str = Field(default="", validation_alias="PRESSROOM_SES_ENDPOINT_URL")
    sns_endpoint_url: str = Field(default="", validation_alias="PRESSROOM_SES_SNS_ENDPOINT_URL")
    sns_dev_certificate: str = Field(default="", validation_alias="PRESSROOM_SES_SNS_DEV_CERTIFICATE")
    timeout_seconds: float = Field(default=30.0, gt=0, validation_alias="PRESSROOM_SES_TIMEOUT_SECONDS")

    @field_validator("region")
    @classmethod
    def _a_region(cls, value: str) -> str:
        if value and not _REGION.fullmatch(value):
            raise ValueError(f"AWS_REGION {value!r} is not a region name (like eu-west-1)")
        return value

    @field_validator("topic_arn")
    @classmethod
    def _a_topic(cls, value: str) -> str:
        if value and not _TOPIC.fullmatch(value):
            raise ValueError("PRESSROOM_SES_TOPIC_ARN is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
        return value

    @field_validator("configuration_set")
    @classmethod
    def _a_configuration_set(cls, value: str) -> str:
        if value and not _CONFIGURATION_SET.fullmatch(value):
            raise ValueError("PRESSROOM_SES_CONFIGURATION_SET holds characters SES does not allow")
        return value

    @property
    def ses_endpoint(self) -> str:
        return (self.endpoint_url or f"https://email.{self.region}.amazonaws.com").rstrip("/")

    @property
    def sns_endpoint(self) -> str:
        return (self.sns_endpoint_url or f"https://sns.{self.region}.amazonaws.com").rstrip("/")

    def require(self) -> SesSettings:
        """These settings, or a ConfigurationError naming the first one missing."""
        for value, name in ((self.region, "AWS_REGION"), (self.access_key_id, "AWS_ACCESS_KEY_ID"),
                            (self.secret_access_key.get_secret_value(), "AWS_SECRET_ACCESS_KEY"),
                            (self.domain, "PRESSROOM_SES_DOMAIN"),
                            (self.configuration_set, "PRESSROOM_SES_CONFIGURATION_SET")):
            if not value:
                raise ConfigurationError(f"{name} is not set (required with PRESSROOM_EMAIL_PROVIDER=ses)")
        return self

    def require_topic(self) -> str:
        if not self.topic_arn:
            raise ConfigurationError("PRESSROOM_SES_TOPIC_ARN is not set: the receiver cannot tell our topic's "
                                     "notifications from another's")
        return self.topic_arn


# The development stack's SES stand-in (`PRESSROOM_EMAIL_PROVIDER=ses pressroom dev up`): its
# values, from the stack file, for the variables that are not set.
_STACK_VALUES = (("ses_region", "AWS_REGION"), ("ses_access_key_id", "AWS_ACCESS_KEY_ID"),
                 ("ses_secret_access_key", "AWS_SECRET_ACCESS_KEY"), ("ses_domain", "PRESSROOM_SES_DOMAIN"),
                 ("ses_configuration_set", "PRESSROOM_SES_CONFIGURATION_SET"),
                 ("ses_topic_arn", "PRESSROOM_SES_TOPIC_ARN"), ("ses_endpoint_url", "PRESSROOM_SES_ENDPOINT_URL"),
                 ("ses_sns_endpoint_url", "PRESSROOM_SES_SNS_ENDPOINT_URL"),
                 ("ses_sns_dev_certificate", "PRESSROOM_SES_SNS_DEV_CERTIFICATE"))


@lru_cache(maxsize=1)
def ses_settings() -> SesSettings:


    stack = read_dev_stack()
    # Credentials come as a set: with AWS_ACCESS_KEY_ID set, none of the stand-in's are mixed in.
    real = "AWS_ACCESS_KEY_ID" in os.environ
    fallback: dict[str, Any] = {variable: stack[key] for key, variable in _STACK_VALUES
                if variable not in os.environ and stack.get(key) and not real}
    return SesSettings(**fallback)
