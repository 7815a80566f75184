// The visitor pages' languages (web/translations.py LANGUAGES, in its order): by their own name, and in English
// where the script is not Latin.
export const LANGS = [
  ["en", "English"], ["th", "ไทย (Thai)"], ["es", "Español"], ["ja", "日本語 (Japanese)"], ["de", "Deutsch"],
  ["fr", "Français"], ["it", "Italiano"], ["pt-BR", "Português (Brasil)"], ["nl", "Nederlands"], ["sv", "Svenska"],
  ["pl", "Polski"], ["tr", "Türkçe"], ["ru", "Русский (Russian)"], ["uk", "Українська (Ukrainian)"],
  ["ar", "العربية (Arabic)"], ["he", "עברית (Hebrew)"], ["hi", "हिन्दी (Hindi)"], ["id", "Bahasa Indonesia"],
  ["vi", "Tiếng Việt"], ["zh-Hans", "简体中文 (Chinese, Simplified)"], ["zh-Hant", "繁體中文 (Chinese, Traditional)"],
  ["ko", "한국어 (Korean)"],
];
export const RTL = ["ar", "he"];
