-- A newsletter's design, in the reference platform's columns with its defaults (its newsletters
-- table): a site that sets nothing gets the reference's default design.
ALTER TABLE newsletters
    ADD COLUMN header_image            text,
    ADD COLUMN show_header_icon        boolean NOT NULL DEFAULT true,
    ADD COLUMN show_header_title       boolean NOT NULL DEFAULT true,
    ADD COLUMN show_header_name        boolean NOT NULL DEFAULT true,
    ADD COLUMN title_font_category     text NOT NULL DEFAULT 'sans_serif',
    ADD COLUMN title_alignment         text NOT NULL DEFAULT 'center',
    ADD COLUMN show_post_title_section boolean NOT NULL DEFAULT true,
    ADD COLUMN show_feature_image      boolean NOT NULL DEFAULT true,
    ADD COLUMN body_font_category      text NOT NULL DEFAULT 'sans_serif',
    ADD COLUMN show_byline             boolean NOT NULL DEFAULT true,
    ADD COLUMN show_excerpt            boolean NOT NULL DEFAULT false,
    ADD COLUMN footer_content          text,
    ADD COLUMN show_badge              boolean NOT NULL DEFAULT true,
    ADD COLUMN background_color        text NOT NULL DEFAULT 'light',
    ADD COLUMN border_color            text,
    ADD COLUMN title_color             text,
    ADD COLUMN link_color              text,
    ADD COLUMN button_color            text;
