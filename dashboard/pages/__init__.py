"""The dashboard's pages: Streamlit scripts run by ``app.py`` through ``st.navigation``."""
